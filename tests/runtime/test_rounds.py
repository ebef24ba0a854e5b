"""rounds(): members answer in synchronous rounds, each seeing the others' latest answers; and the
turns of the controller API it runs on."""

from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.agent import react
from inspect_ai.event import ModelEvent
from inspect_ai.util import token_limit

from inspect_swarm import (
    Budget,
    Controller,
    MemberEnded,
    StopReason,
    SwarmControl,
    TurnEnded,
    member,
    rounds,
    shared_memory,
    swarm,
    swarm_controller,
    swarm_react,
)

from .helpers import infos, metrics_member, result, run, statuses, stop_reason


def inputs(sample: Any, name: str) -> list[str]:
    """The last input message of each of the member's model calls: its preamble, then the
    answers it was shown."""
    texts = []
    for event in sample.events:
        if isinstance(event, ModelEvent):
            text = event.input[-1].text
            texts.append(sample.attachments.get(text.removeprefix("attachment://"), text))
    return [t for t in texts if t.startswith(f"You are {name},") or f"--- {name} (you) ---" in t]


def test_each_round_shows_every_members_latest_answer(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=rounds(3), channels=[]),
        {
            "react-1": [{"submit": "41"}, {"submit": "42"}, {"submit": "42"}],
            # -2 is slow in round 1: -1's second turn waits for it
            "react-2": [{"submit": "42", "delay": 0.3}, {"submit": "42"}, {"submit": "42"}],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "controller:rounds_done"
    assert statuses(sample) == {"react-1": "submitted", "react-2": "submitted"}
    first, second, third = inputs(sample, "react-1")
    assert "answer in 3 rounds" in first
    assert second.startswith("Turn 2. The latest answers of the members follow")
    assert "--- react-1 (you) ---\n41\n\n--- react-2 ---\n42" in second
    assert "--- react-1 (you) ---\n42\n\n--- react-2 ---\n42" in third
    assert "--- react-1 ---\n41\n\n--- react-2 (you) ---\n42" in inputs(sample, "react-2")[1]
    # the answer is the earliest submission of the final round
    assert result(sample)["final"]["mode"] == "first" and sample.output.completion == "42"
    assert [metrics_member(sample, m)["steps"] for m in ("react-1", "react-2")] == [3, 3]
    # a submission in each of the three rounds
    assert [metrics_member(sample, m)["submissions"] for m in ("react-1", "react-2")] == [3, 3]


def test_rounds_can_end_with_a_vote(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=3), controller=rounds(2, vote=True), channels=[]),
        {
            "react-1": [{"submit": "41"}, {"submit": "41"}],
            "react-2": [{"submit": "40"}, {"submit": "42", "delay": 0.1}],
            "react-3": [{"submit": "42"}, {"submit": "42", "delay": 0.2}],
        },
        tmp_path,
    )
    assert sample.output.completion == "42"
    assert result(sample)["final"]["reason"] == (
        "vote: 2 of 3 submissions agree (2: react-2, react-3; 1: react-1)"
    )


def test_a_members_limits_cover_all_its_turns(backend: str, tmp_path: Path) -> None:
    # each call is 110 tokens: "short" passes its limit at its third call, in round 3, where a
    # limit per turn would never end it
    sample = run(
        swarm(
            [member(react, name="short", limits=[token_limit(250)]), member(react, name="long")],
            controller=rounds(4),
            channels=[],
        ),
        {"short": [{"submit": "41"}] * 4, "long": [{"submit": "42"}] * 4},
        tmp_path,
    )
    assert statuses(sample) == {"short": "member_limit:token", "long": "submitted"}
    assert stop_reason(sample) == "controller:rounds_done"
    assert [metrics_member(sample, m)["steps"] for m in ("short", "long")] == [3, 4]
    # the member that ended is shown with its last answer, and takes no more turns
    assert len(inputs(sample, "short")) == 3
    assert "--- long (you) ---\n42\n\n--- short ---\n41" not in inputs(sample, "long")[3]
    assert "--- short ---\n41" in inputs(sample, "long")[3]


def test_a_stop_ends_members_waiting_for_a_turn_as_they_were(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(react, count=2),
            controller=rounds(2),
            channels=[],
            budget=Budget(tokens=1_000),
        ),
        {"react-1": [{"submit": "42"}], "react-2": [{"text": "Hmm.", "delay": 0.02}] * 20},
        tmp_path,
    )
    assert stop_reason(sample) == "swarm_cap"
    # -1 finished its turn and waited for the next; the cap ended it with its submission
    assert statuses(sample) == {"react-1": "submitted", "react-2": "swarm_cap"}
    assert result(sample)["final"]["member"] == "react-1"


def test_a_member_waiting_for_its_turn_counts_as_waiting(backend: str, tmp_path: Path) -> None:
    wait = {"tool": "swarm_wait", "arguments": {"timeout": 10}}
    sample = run(
        swarm(member(swarm_react, count=2), controller=rounds(2), channels=[shared_memory()]),
        {
            "swarm_react-1": [{"submit": "42"}, {"submit": "42"}],
            "swarm_react-2": [{"text": "Later.", "delay": 0.2}, wait, {"submit": "42"}] * 2,
        },
        tmp_path,
    )
    [first, *_] = [e for e in infos(sample, "comm") if e["kind"] == "waited"]
    # -1 has finished its turn, so nothing can change until -2 acts: its wait ends at once
    assert first["member"] == "swarm_react-2" and first["outcome"] == "all_waiting"
    assert first["seconds"] < 5
    assert stop_reason(sample) == "controller:rounds_done"


def test_rounds_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"rounds\(n=...\): n must be .* 1 or more, not 0"):
        rounds(0)
    with pytest.raises(ValueError, match=r"not True"):
        rounds(True)
    with pytest.raises(ValueError, match=r"rounds\(vote=True, final='last'\)"):
        rounds(2, vote=True, final="last")


@swarm_controller
def retry(turns: int = 3) -> Controller:
    """Each member answers again, up to `turns` times, until an answer passes the scorer."""

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m, turns=True)
        async with aclosing(swarm.events(TurnEnded, MemberEnded)) as events:
            async for event in events:
                if not isinstance(event, TurnEnded):
                    continue
                if event.submitted and await swarm.verify(event.member):
                    swarm.choose_answer(event.member, reason="passed the scorer")
                    return "verified"
                swarm.next_turn(event.member, show=[event.member], last=event.turn + 1 == turns)
        return "all_done"

    return Controller(run)


def test_a_member_waiting_for_a_turn_can_be_checked_and_chosen(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(member(react, count=2), controller=retry(), channels=[]),
        {
            "react-1": [{"submit": "41"}, {"submit": "40"}, {"submit": "39"}],
            "react-2": [{"submit": "43", "delay": 0.1}, {"submit": "42", "delay": 0.1}],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "verified"
    # both were waiting for a turn when the swarm stopped: each ends as its last turn did
    assert statuses(sample) == {"react-1": "submitted", "react-2": "submitted"}
    assert result(sample)["final"] == {
        "mode": "controller",
        "member": "react-2",
        "reason": "passed the scorer",
        "provisional": False,
    }
    assert sample.output.completion == "42"
    counts = [(m["gate_checks"], m["gate_passes"]) for m in result(sample)["members"]]
    assert counts[1] == (2, 1) and counts[0][1] == 0
    # a member shown only its own answer
    assert "--- react-2 (you) ---\n43" in inputs(sample, "react-2")[1]


@swarm_controller
def misuse(call: str) -> Controller:
    """Calls the turn API wrongly, to test its errors."""

    async def run(swarm: SwarmControl) -> StopReason:
        [a, b] = swarm.members
        swarm.start(a, turns=True)
        swarm.start(b)
        async with aclosing(swarm.events(TurnEnded, MemberEnded)) as events:
            async for event in events:
                if isinstance(event, MemberEnded) and call == "next_turn_after_end":
                    swarm.next_turn(event.member)
                if isinstance(event, TurnEnded) and call == "start_again":
                    swarm.start(event.member)
                if isinstance(event, TurnEnded) and call == "events_kind":
                    swarm.events(str)  # type: ignore[arg-type]
                if isinstance(event, TurnEnded) and call == "verify_unsubmitted":
                    await swarm.verify(b)
        return "done"

    return Controller(run)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("next_turn_after_end", "member 'react-2' is not waiting for a turn"),
        ("start_again", "member 'react-1' has already started; a member runs once"),
        ("events_kind", "<class 'str'> is not a kind of event"),
        ("verify_unsubmitted", "member 'react-2' has no submission to check"),
    ],
)
def test_the_turn_api_refuses_misuse(call: str, message: str, tmp_path: Path) -> None:
    log_sample = run(
        swarm(member(react, count=2), controller=misuse(call), channels=[]),
        {"react-1": [{"submit": "42"}], "react-2": [{"text": "Hmm.", "delay": 0.1}] * 3},
        tmp_path,
    )
    assert log_sample.error is not None and message in log_sample.error.message
