"""The swarm's results in the transcript: how each member ended, and the answer it settled."""

from pathlib import Path
from typing import Any

from inspect_ai.agent import react
from inspect_ai.event import InfoEvent
from inspect_ai.log import EvalSample

from inspect_swarm import leaderless, member, swarm

from .helpers import ALL_RUN, result, run

SLOW = [{"text": "still working", "delay": 0.2}]


def swarm_infos(sample: EvalSample) -> list[dict[str, Any]]:
    """The swarm's own InfoEvents, in the order logged."""
    return [
        e.data
        for e in sample.events
        if isinstance(e, InfoEvent) and e.source == "inspect_swarm" and isinstance(e.data, dict)
    ]


def results(sample: EvalSample, kind: str) -> list[dict[str, Any]]:
    """The swarm's `result` events of this kind (`member_result`, `final`)."""
    return [d for d in swarm_infos(sample) if d["type"] == "result" and d["kind"] == kind]


def test_each_member_end_and_the_answer_are_logged_before_the_ledger(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            member(react, count=2),
            controller=leaderless(stop_on_submission=False, final="last"),
            channels=[],
        ),
        {
            "react-1": [{"submit": "41"}],
            "react-2": [{"text": "checking", "delay": 0.2}, {"submit": "42"}],
        },
        tmp_path,
    )
    logged = swarm_infos(sample)
    assert [(d["type"], d.get("kind"), d.get("member")) for d in logged] == [
        ("result", "member_result", "react-1"),
        ("result", "member_result", "react-2"),
        ("stop", None, None),
        ("result", "final", "react-2"),
        ("submissions", None, None),
        ("ledger", None, None),
        ("metrics", None, None),
    ]
    # each member's event is its entry of the result record, as it ended
    entries = result(sample)["members"]
    for event, entry in zip(results(sample, "member_result"), entries, strict=True):
        assert event == {
            "type": "result",
            "kind": "member_result",
            "member": entry["name"],
            **entry,
        }
    [final] = results(sample, "final")
    assert final == {
        "type": "result",
        "kind": "final",
        "mode": "last",
        "member": "react-2",
        "reason": None,
        "provisional": False,
    }
    # the answer's message names the answer in the result record's `final` shape
    answer = sample.messages[-1]
    assert answer.metadata == {"inspect_swarm": {"final": {"mode": "last", "member": "react-2"}}}


def test_the_final_event_with_no_submission(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=ALL_RUN, channels=[]),
        {"*": [{"text": "too long", "stop_reason": "model_length"}]},
        tmp_path,
    )
    [final] = results(sample, "final")
    assert final["mode"] is None and final["member"] is None
    assert (final["reason"], final["provisional"]) == ("no_submissions", False)
    assert [d["status"] for d in results(sample, "member_result")] == ["unsubmitted"] * 2
    assert sample.messages[-1].role == "user"  # no answer, so no answer message


def test_the_final_event_of_a_sample_a_limit_ended_is_provisional(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(member(react, count=2), controller=ALL_RUN, channels=[]),
        {"react-1": [{"submit": "42", "delay": 0.1}], "react-2": SLOW * 50},
        tmp_path,
        token_limit=500,
    )
    assert sample.limit is not None and sample.limit.type == "token"
    [final] = results(sample, "final")
    assert (final["member"], final["provisional"]) == ("react-1", True)
    ended = {d["member"]: d["status"] for d in results(sample, "member_result")}
    assert ended == {"react-1": "submitted", "react-2": "cancelled"}
    assert [d["type"] for d in swarm_infos(sample)][-2:] == ["ledger", "metrics"]
