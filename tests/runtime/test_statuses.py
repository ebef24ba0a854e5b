from pathlib import Path

import anyio
from inspect_ai.agent import Agent, AgentState, agent, as_solver, react
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import LimitExceededError, token_limit

from inspect_swarm import member, swarm

from .helpers import ALL_RUN, result, run, statuses

SLOW = [{"text": "still working", "delay": 0.2}]


@agent
def custom_stop(in_task_group: bool = False) -> Agent:
    async def execute(state: AgentState) -> AgentState:
        async def stop() -> None:
            raise LimitExceededError("custom", value=1, limit=1, message="gave up")

        if in_task_group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop)
        else:
            await stop()
        return state

    return execute


@agent
def broken() -> Agent:
    async def execute(state: AgentState) -> AgentState:
        raise RuntimeError("the agent broke")

    return execute


def test_unsubmitted_on_content_filter_and_model_length(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=ALL_RUN, channels=[]),
        {
            "react-1": [{"text": "no", "stop_reason": "content_filter"}] * 5,
            "react-2": [{"text": "long", "stop_reason": "model_length"}],
        },
        tmp_path,
    )
    assert statuses(sample) == {"react-1": "unsubmitted", "react-2": "unsubmitted"}


def test_member_limit_ends_only_that_member(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            [
                member(react, name="small", limits=[token_limit(150)]),
                member(react, name="big"),
            ],
            controller=ALL_RUN,
            channels=[],
        ),
        {"small": SLOW * 10, "big": [{"text": "x"}, {"submit": "42"}]},
        tmp_path,
    )
    assert statuses(sample) == {"small": "member_limit:token", "big": "submitted"}
    assert sample.limit is None


def test_custom_limit_ends_only_its_member(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            [
                member(custom_stop, name="quitter"),
                member(custom_stop, {"in_task_group": True}, name="group"),
                member(react, name="worker"),
            ],
            controller=ALL_RUN,
            channels=[],
        ),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    assert statuses(sample) == {
        "quitter": "member_limit:custom",
        "group": "member_limit:custom",
        "worker": "submitted",
    }
    assert sample.limit is None
    assert result(sample)["final"]["member"] == "worker"


def test_an_error_ends_the_sample_with_records(backend: str, tmp_path: Path) -> None:
    from .helpers import run_log

    log = run_log(
        swarm([member(broken), member(react)], controller=ALL_RUN, channels=[]),
        {"*": SLOW * 10},
        tmp_path,
    )
    assert log.status == "error"
    assert log.samples
    sample = log.samples[0]
    assert sample.error is not None and "the agent broke" in sample.error.message
    assert statuses(sample)["broken"] == "errored"
    assert statuses(sample)["react"] == "cancelled"
    assert sample.store["inspect_swarm:ledger"]["interrupted"] is True


def test_sample_token_limit_is_not_swallowed(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), channels=[]), {"*": SLOW * 20}, tmp_path, token_limit=500
    )
    assert sample.limit is not None and sample.limit.type == "token"
    ledger = sample.store["inspect_swarm:ledger"]
    assert ledger["ended_by"] == "sample_limit:token"
    assert ledger["interrupted"] is True


@solver
def cut_short(seconds: float) -> Solver:
    """A swarm that the task's own solver cancels after `seconds`, with no limit or operator."""
    inner = as_solver(swarm(member(react, count=2), channels=[]))

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        with anyio.move_on_after(seconds):
            return await inner(state, generate)
        return state

    return solve


def test_a_cancellation_from_outside_with_no_cause_is_ended_by_unknown(
    backend: str, tmp_path: Path
) -> None:
    sample = run(cut_short(0.3), {"*": SLOW * 50}, tmp_path)
    assert sample.error is None and sample.limit is None
    ledger = sample.store["inspect_swarm:ledger"]
    assert (ledger["ended_by"], ledger["stop_reason"]) == ("unknown", None)
    assert ledger["interrupted"] is True and ledger["total_complete"] is False
    assert [m["cancelled"] for m in ledger["members"]] == [True, True]
    assert statuses(sample) == {"react-1": "cancelled", "react-2": "cancelled"}


def test_a_stopped_member_is_cancelled_after_the_grace_period(backend: str, tmp_path: Path) -> None:
    from inspect_swarm import Budget

    sample = run(
        swarm(member(react, count=2), channels=[], budget=Budget(grace=0.2)),
        {
            "react-1": [{"text": "x", "delay": 0.05}, {"submit": "42"}],
            "react-2": [{"text": "slow", "delay": 30}],
        },
        tmp_path,
    )
    assert statuses(sample) == {"react-1": "submitted", "react-2": "cancelled"}
    ledger = sample.store["inspect_swarm:ledger"]
    assert [m["cancelled"] for m in ledger["members"]] == [False, True]
    # the cancelled member's time is the end of the grace period, not its 30 s call
    assert result(sample)["members"][1]["time"] < 5
