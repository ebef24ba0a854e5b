"""The stop conditions and the controllers built on them: verified(), quiescence(), stall,
any_of/all_of and leaderless(stop=...)."""

from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.event import ScoreEvent
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import TaskState

from inspect_swarm import (
    all_of,
    any_of,
    leaderless,
    member,
    quiescence,
    quiescent,
    shared_memory,
    stall,
    submission,
    swarm,
    swarm_react,
    verified,
    verified_pass,
)
from inspect_swarm.scripted import scripted_model

from .helpers import infos, metrics_member, result, run, run_log, statuses, stop_reason
from .todo_channel import todo

SLOW = {"text": "Still working.", "delay": 0.3}
WAIT = {"tool": "swarm_wait", "arguments": {"timeout": 30}}


def gates(sample: Any) -> dict[str, tuple[int, int, float | None]]:
    return {
        m["name"]: (m["gate_checks"], m["gate_passes"], m["first_pass_time"])
        for m in result(sample)["members"]
    }


# ---- verified ------------------------------------------------------------------------------


def test_verified_stops_at_the_first_submission_that_passes(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=3), controller=verified(), channels=[]),
        {
            "react-1": [{"submit": "41"}],
            "react-2": [{"submit": "42", "delay": 0.3}],
            "react-3": [SLOW] * 20,
        },
        tmp_path,
    )
    assert stop_reason(sample) == "verified"
    assert statuses(sample) == {
        "react-1": "submitted",
        "react-2": "submitted",
        "react-3": "stopped",
    }
    # the earlier, failing submission is not the answer: the one that passed is
    assert sample.output.completion == "42"
    assert result(sample)["final"] == {
        "mode": "controller",
        "member": "react-2",
        "reason": "the first submission to pass the check",
        "provisional": False,
    }
    counts = gates(sample)
    assert counts["react-1"] == (1, 0, None) and counts["react-3"] == (0, 0, None)
    # the controller's checks are no submissions of the members'
    submitted = {
        m["name"]: m["submissions"] for m in sample.store["inspect_swarm:metrics"]["members"]
    }
    assert submitted == {"react-1": 1, "react-2": 1, "react-3": 0}
    checks, passes, first_pass = counts["react-2"]
    assert (checks, passes) == (1, 1)
    # the pass came after the member ended, and the swarm stopped on it
    [react_2] = [m for m in result(sample)["members"] if m["name"] == "react-2"]
    assert first_pass is not None and first_pass >= react_2["time"]
    assert metrics_member(sample, "react-2")["first_pass_time"] == first_pass
    scores = [e for e in sample.events if isinstance(e, ScoreEvent) and e.intermediate]
    assert [e.score.value for e in scores] == [INCORRECT, CORRECT]


@scorer(metrics=[accuracy()])
def odd() -> Scorer:
    """Passes an odd number."""

    async def score(state: TaskState, target: Target) -> Score:
        text = state.output.completion.strip()
        return Score(value=CORRECT if text.isdigit() and int(text) % 2 else INCORRECT)

    return score


def test_verified_checks_with_a_given_scorer(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=verified(check=odd()), channels=[]),
        {"react-1": [{"submit": "40"}], "react-2": [{"submit": "41", "delay": 0.2}]},
        tmp_path,
    )
    assert stop_reason(sample) == "verified"
    assert result(sample)["final"]["member"] == "react-2"
    assert gates(sample)["react-1"][:2] == (1, 0) and gates(sample)["react-2"][:2] == (1, 1)
    # the task's own scorer still scores the answer, and 41 is not its target
    assert sample.scores is not None and sample.scores["includes"].value == INCORRECT


def test_verified_ends_all_done_when_nothing_passes(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=verified(), channels=[]),
        {"react-1": [{"submit": "40"}], "react-2": [{"submit": "41", "delay": 0.1}]},
        tmp_path,
    )
    assert stop_reason(sample) == "all_done"
    assert result(sample)["final"]["mode"] == "first" and sample.output.completion == "40"
    assert [g[:2] for g in gates(sample).values()] == [(1, 0), (1, 0)]


def test_verified_without_a_scorer_says_how_to_give_one(tmp_path: Path) -> None:
    unscored = Task(
        dataset=[Sample(input="What is six times seven?", target="42")],
        solver=swarm(member(react, count=2), controller=verified(), channels=[]),
    )
    model = scripted_model({"members": {"*": [{"submit": "42"}]}})
    [log] = eval(unscored, model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "error" and log.samples
    error = log.samples[0].error
    assert error is not None and "the task has no scorer" in error.message
    assert "verified(check=match())" in error.message


def test_verified_checks_with_its_own_scorer_in_a_task_without_one(tmp_path: Path) -> None:
    unscored = Task(
        dataset=[Sample(input="An odd number?", target="odd")],
        solver=swarm(member(react, count=2), controller=verified(check=odd()), channels=[]),
    )
    members = {"react-1": [{"submit": "40"}], "react-2": [{"submit": "41", "delay": 0.2}]}
    model = scripted_model({"members": members})
    [log] = eval(unscored, model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "success" and log.samples
    assert stop_reason(log.samples[0]) == "verified"
    assert result(log.samples[0])["final"]["member"] == "react-2"


# ---- quiescence ----------------------------------------------------------------------------


def waited(sample: Any) -> list[tuple[str, str, float]]:
    return [
        (e["member"], e["outcome"], e["seconds"])
        for e in infos(sample, "comm")
        if e["kind"] == "waited"
    ]


def test_quiescence_stops_when_every_member_waits(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(swarm_react, count=3),
            controller=quiescence(settle=0.3),
            channels=[shared_memory()],
        ),
        {"swarm_react-1": [{"submit": "42"}], "*": [WAIT] * 4},
        tmp_path,
    )
    assert stop_reason(sample) == "quiescence"
    assert statuses(sample) == {
        "swarm_react-1": "submitted",
        "swarm_react-2": "stopped",
        "swarm_react-3": "stopped",
    }
    assert sample.output.completion == "42"
    # the first waits end with the news that swarm_react-1 ended; the next are held through
    # the settle period and end with the stop, never released to act again
    last = waited(sample)[-2:]
    assert sorted((m, outcome) for m, outcome, _ in last) == [
        ("swarm_react-2", "stopping"),
        ("swarm_react-3", "stopping"),
    ]
    assert all(seconds >= 0.3 for _, _, seconds in last)
    assert "the work ends when every member is waiting" in " ".join(sample.attachments.values())


def test_quiescence_waits_for_open_work(backend: str, tmp_path: Path) -> None:
    todo_done = {"tool": "todo", "arguments": {"command": "done", "item": "tests"}}
    sample = run(
        swarm(
            member(swarm_react, args={"tools": []}, count=2),
            controller=quiescence(settle=0.2),
            channels=[shared_memory(), todo({"tests": None})],
        ),
        # -1 waits, is released while "tests" is open, then closes it and waits again
        {"swarm_react-1": [WAIT, todo_done, WAIT, WAIT], "swarm_react-2": [WAIT] * 4},
        tmp_path,
    )
    assert stop_reason(sample) == "quiescence"
    outcomes = [(m, outcome) for m, outcome, _ in waited(sample)]
    # the first waits end, in either order, for the open item; the last are held, then stopped
    assert sorted(outcomes[:2]) == [
        ("swarm_react-1", "all_waiting"),
        ("swarm_react-2", "all_waiting"),
    ]
    assert sorted(outcomes[-2:]) == [("swarm_react-1", "stopping"), ("swarm_react-2", "stopping")]
    done = [e for e in infos(sample, "comm") if e["kind"] == "delivered" and e["channel"] == "todo"]
    assert len(done) == 1


def test_quiescence_ends_all_done_when_members_never_wait(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=quiescence(), channels=[]),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    assert stop_reason(sample) == "all_done"
    assert statuses(sample) == {"react-1": "submitted", "react-2": "submitted"}


# ---- stall and composition -----------------------------------------------------------------


THINK = {"text": "Hmm."}


def append(text: str) -> dict[str, Any]:
    arguments = {"command": "append", "path": "/shared_memory/log", "append_text": text}
    return {"tool": "shared_memory", "arguments": arguments}


def test_stall_counts_calls_since_the_last_record(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(swarm_react, name="solo"),
            controller=leaderless(stop=any_of(submission(), stall(4))),
            channels=[shared_memory()],
        ),
        # each call takes a moment, so the controller hears of each before the next starts
        {"solo": [{**step, "delay": 0.05} for step in [THINK, THINK, append("x"), *[THINK] * 10]]},
        tmp_path,
    )
    assert stop_reason(sample) == "controller:stalled"
    assert statuses(sample) == {"solo": "stopped"}
    # three calls, the record resets the count, then four calls without one; the member may
    # have started one more call before the controller's stop reached it
    assert metrics_member(sample, "solo")["steps"] in (7, 8)


def test_any_of_stops_at_the_first_condition_met(tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(react, count=2),
            controller=leaderless(stop=submission() | stall(50)),
            channels=[],
        ),
        {"react-1": [{"submit": "42"}], "react-2": [SLOW] * 20},
        tmp_path,
    )
    assert stop_reason(sample) == "submitted"
    assert statuses(sample) == {"react-1": "submitted", "react-2": "stopped"}


def test_all_of_stops_once_each_condition_has_been_met(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(react, count=2),
            controller=leaderless(stop=submission() & stall(3)),
            channels=[],
        ),
        {"react-1": [{"submit": "42"}], "react-2": [{"text": "Hmm.", "delay": 0.05}] * 20},
        tmp_path,
    )
    # the submission came first and counted; the swarm stopped on the stall that followed it
    assert stop_reason(sample) == "controller:stalled"
    assert statuses(sample) == {"react-1": "submitted", "react-2": "stopped"}
    # at least three calls without progress: on a loaded machine react-2 may have made some
    # before react-1's submission, and one more may start before the stop reaches it
    assert metrics_member(sample, "react-2")["steps"] >= 3


def test_stop_conditions_compose_and_are_logged_by_their_fields(tmp_path: Path) -> None:
    stop = verified_pass() | (submission() & stall(3)) | quiescent(1)
    assert stop == any_of(any_of(verified_pass(), all_of(submission(), stall(3))), quiescent(1))
    log = run_log(
        swarm(member(react, count=2), controller=leaderless(stop=stop), channels=[]),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    assert log.plan.steps[0].params["controller"]["params"]["stop"] == {
        "condition": "any_of",
        "conditions": [
            {
                "condition": "any_of",
                "conditions": [
                    {"condition": "verified_pass", "check": None},
                    {
                        "condition": "all_of",
                        "conditions": [
                            {"condition": "submission"},
                            {"condition": "stall", "calls": 3},
                        ],
                    },
                ],
            },
            {"condition": "quiescent", "settle": 1.0},
        ],
    }
    assert log.samples and stop_reason(log.samples[0]) == "verified"


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: stall(0), ValueError, r"stall\(calls=...\): calls must be .* not 0"),
        (lambda: stall(2.5), ValueError, "not 2.5"),
        (lambda: quiescent(-1), ValueError, r"quiescent\(settle=...\): .* not -1"),
        (lambda: quiescence(settle="2"), ValueError, r"quiescence\(settle=...\): .* not '2'"),
        (lambda: any_of(), ValueError, r"any_of\(\): give it at least one"),
        (lambda: all_of(submission(), "stall"), TypeError, "'stall' is not a stop condition"),
        (
            lambda: any_of(verified_pass(), all_of(verified_pass(), stall(2))),
            ValueError,
            "verified_pass\\(\\) is given more than once",
        ),
        (lambda: verified_pass(check="match"), TypeError, "'match' is not a scorer"),
        (lambda: verified(check=5), TypeError, r"verified\(check=...\): 5 is not a scorer"),
        (
            lambda: leaderless(False, stop=stall(3)),
            ValueError,
            "the stop condition replaces stop_on_submission",
        ),
        (lambda: leaderless(stop="stall"), TypeError, "'stall' is not a stop condition"),
    ],
)
def test_bad_stop_arguments_are_refused(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()
