from pathlib import Path

import pytest
from inspect_ai.agent import deepagent, react, subagent
from inspect_ai.log import EvalSample
from inspect_ai.util import token_limit

from inspect_swarm import Budget, member, swarm
from inspect_swarm.scripted import scripted_model

from ..runtime.helpers import ALL_RUN, ledger_member, metrics_member, result, run, statuses
from .agents import background_in_factory, background_worker, events


def member_time(sample: EvalSample, name: str) -> float:
    time: float = next(m["time"] for m in result(sample)["members"] if m["name"] == name)
    return time


def test_background_work_is_drained_within_the_grace_period(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(background_worker, {"seconds": 0.3}, name="w"), budget=Budget(grace=30)),
        {"*": []},
        tmp_path,
    )
    assert statuses(sample) == {"w": "submitted"}
    assert events(sample) == ["finished"]
    w = ledger_member(sample, "w")
    assert (w["background_started"], w["background_cancelled"], w["cancelled"]) == (1, 0, False)
    # the member ended after its background work
    assert member_time(sample, "w") >= 0.3


def test_background_work_is_cancelled_after_the_grace_period(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(background_worker, {"seconds": 30}, name="w"), budget=Budget(grace=0.3)),
        {"*": []},
        tmp_path,
    )
    # the agent's status is kept; the cancelled work's cleanup ran before the member ended
    assert statuses(sample) == {"w": "submitted"}
    assert events(sample) == ["cleaned up"]
    w = ledger_member(sample, "w")
    assert (w["background_started"], w["background_cancelled"]) == (1, 1)
    assert 0.3 <= member_time(sample, "w") < 10
    assert sample.store["inspect_swarm:ledger"]["total_complete"] is False


def test_grace_zero_cancels_background_work_at_once(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(background_worker, {"seconds": 0.5}, name="w"), budget=Budget(grace=0)),
        {"*": []},
        tmp_path,
    )
    assert events(sample) == ["cleaned up"]
    w = ledger_member(sample, "w")
    assert (w["background_started"], w["background_cancelled"]) == (1, 1)
    assert member_time(sample, "w") < 0.5


def test_background_calls_are_the_members(tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(background_worker, {"calls": 2, "seconds": 0, "wait": 0.5}, name="w"),
            budget=Budget(grace=30),
        ),
        {"w": [{"text": "one"}, {"text": "two"}]},
        tmp_path,
    )
    assert events(sample) == ["finished"]
    w = ledger_member(sample, "w")
    assert w["calls"]["calls"] == 2
    assert w["meter"]["usage"]["total_tokens"] == 220
    assert metrics_member(sample, "w")["tokens"] == 220


def test_background_work_starts_no_call_once_the_agent_returned(tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(background_worker, {"calls": 2, "seconds": 0}, name="w"),
            budget=Budget(grace=30),
        ),
        {"w": [{"text": "one"}, {"text": "two"}]},
        tmp_path,
    )
    # the refused call ended the task, which is not a cancellation
    assert events(sample) == []
    w = ledger_member(sample, "w")
    assert w["calls"]["calls"] == 0
    assert (w["background_started"], w["background_cancelled"]) == (1, 0)


def test_a_member_limit_ends_only_the_background_task_that_reached_it(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            member(
                background_worker,
                {"calls": 5, "seconds": 0, "wait": 0.5},
                name="w",
                limits=[token_limit(150)],
            ),
            budget=Budget(grace=30),
        ),
        {"w": [{"text": "step"}] * 5},
        tmp_path,
    )
    assert sample.limit is None and sample.error is None
    # the agent returned normally; its background task ended at the limit, not cancelled
    assert statuses(sample) == {"w": "submitted"}
    assert events(sample) == []
    w = ledger_member(sample, "w")
    assert (w["background_started"], w["background_cancelled"]) == (1, 0)
    assert w["calls"]["calls"] == 2


def test_a_swarm_cap_ends_the_background_task_that_reached_it(tmp_path: Path) -> None:
    sample = run(
        swarm(
            [
                member(background_worker, {"calls": 5, "seconds": 0, "wait": 0.5}, name="w"),
                member(react, name="other"),
            ],
            controller=ALL_RUN,
            channels=[],
            budget=Budget(tokens=200, grace=30),
        ),
        {"w": [{"text": "step"}] * 5, "other": [{"text": "x", "after": "stop"}] * 5},
        tmp_path,
    )
    assert sample.limit is None and sample.error is None
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "swarm_cap"
    w = ledger_member(sample, "w")
    assert w["calls"]["calls"] == 2
    assert (w["background_started"], w["background_cancelled"]) == (1, 0)
    assert events(sample) == []


@pytest.mark.parametrize("catch", [False, True])
def test_a_factory_that_starts_background_work_makes_the_member_errored(
    catch: bool, backend: str, tmp_path: Path
) -> None:
    # the member is errored even when its factory catches the refusal
    sample = run(
        swarm(member(background_in_factory, {"catch": catch}, name="w"), channels=[]), {}, tmp_path
    )
    assert statuses(sample) == {"w": "errored"}
    assert sample.error is not None
    assert "factory started background work while building its agent" in sample.error.message
    # the work is the member's: started, and cancelled by the swarm before it ran
    w = ledger_member(sample, "w")
    assert (w["background_started"], w["background_cancelled"]) == (1, 1)
    assert sample.store["inspect_swarm:ledger"]["total_complete"] is False


def test_deepagent_background_subagents_belong_to_the_member(backend: str, tmp_path: Path) -> None:
    helper = subagent(
        name="helper",
        description="Does one piece of work.",
        prompt="Do the work.",
        model=scripted_model({"members": {"*": [{"submit": "done", "delay": 0.3}]}}, name="sub"),
    )
    agent = deepagent(
        subagents=[helper], background=True, compaction=None, memory=False, todo_write=False
    )
    sample = run(
        swarm(member(agent, name="deep"), budget=Budget(grace=30)),
        {
            "deep": [
                {"tool": "agent", "arguments": {"prompt": "work", "background": True}},
                {"submit": "42"},
            ]
        },
        tmp_path,
    )
    assert sample.error is None
    assert statuses(sample) == {"deep": "submitted"}
    deep = ledger_member(sample, "deep")
    assert (deep["background_started"], deep["background_cancelled"]) == (1, 0)
    # the subagent's call is the member's
    assert deep["calls"]["calls"] == 3
