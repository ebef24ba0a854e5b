from contextlib import aclosing, suppress
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.agent import Agent, AgentState, agent, react, run
from inspect_ai.model import get_model
from inspect_ai.tool import Tool, tool
from inspect_ai.util import LimitExceededError

from inspect_swarm import Controller, StopReason, SwarmControl, member, swarm, swarm_controller
from inspect_swarm.scripted import ScriptError

from ..runtime import helpers


@tool
def echo() -> Tool:
    async def execute(x: int) -> str:
        """Echo a number.

        Args:
            x: The number.
        """
        return str(x)

    return execute


def echo_call(x: int) -> dict[str, Any]:
    return {"tool": "echo", "arguments": {"x": x}}


@agent
def counted() -> Agent:
    """A failed call, a call and its cache replay, and a subagent's submission; it then stops
    itself, so it is never the answer."""

    async def execute(state: AgentState) -> AgentState:
        model = get_model()
        with suppress(ScriptError):
            await model.generate("this call fails")
        await model.generate("cached", cache=True)
        await model.generate("cached", cache=True)
        await run(react(name="helper"), "help")
        raise LimitExceededError("custom", value=0, limit=0, message="done counting")

    return execute


@swarm_controller
def all_but(skip: str) -> Controller:
    """Start every member but one, and run until they end."""

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            if m.name != skip:
                swarm.start(m)
        async with aclosing(swarm.events()) as events:
            async for _ in events:
                pass
        return "all_done"

    return Controller(run)


def test_metrics_of_a_run_with_known_calls_steps_and_tool_repeats(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path / "cache"))
    sample = helpers.run(
        swarm(
            [
                member(react, {"tools": [echo()]}, name="tools"),
                member(counted, name="custom"),
                member(react, name="idle"),
            ],
            controller=all_but("idle"),
            channels=[],
        ),
        {
            "tools": [echo_call(1), echo_call(1), echo_call(1), echo_call(2), {"submit": "42"}],
            "custom": [
                {"error": "scripted failure"},
                {"text": "cached"},
                {"submit": "done"},
            ],
        },
        tmp_path,
    )
    assert helpers.statuses(sample) == {
        "tools": "submitted",
        "custom": "member_limit:custom",
        "idle": None,
    }
    metrics = sample.store["inspect_swarm:metrics"]
    assert [data["metrics"] for data in helpers.infos(sample, "metrics")] == [metrics]
    members = {m["name"]: m for m in metrics["members"]}
    assert list(members) == ["tools", "custom", "idle"]

    # the answer is the first submission, after five completed calls
    assert metrics["steps_to_answer"] == 5
    assert metrics["longest_member_steps"] == 5
    assert metrics["never_acted"] == ["idle"]
    assert metrics["tokens"] == 7 * 110 and metrics["cost"] == pytest.approx(7 * 0.002)
    assert metrics["wall_clock"] > 0

    tools = members["tools"]
    assert (tools["steps"], tools["longest_identical_tool_run"]) == (5, 3)
    assert (tools["tokens"], tools["cost"]) == (550, pytest.approx(0.01))
    assert tools["running_time"] > 0

    # the failed call is no step, the cache replay and the subagent's call are
    custom = members["custom"]
    assert custom["steps"] == 3
    assert custom["tokens"] == 220
    assert custom["longest_identical_tool_run"] == 1  # the subagent's submission
    ledger = {m["name"]: m for m in sample.store["inspect_swarm:ledger"]["members"]}
    assert ledger["custom"]["calls"] == {
        "calls": 2,
        "cache_replays": 1,
        "errored": 1,
        "no_usage": 0,
        "unpriced": 0,
    }

    idle = members["idle"]
    assert idle["running_time"] is None
    assert (idle["tokens"], idle["cost"], idle["steps"]) == (0, 0.0, 0)
    assert idle["longest_identical_tool_run"] == 0

    for m in members.values():
        assert (m["gate_checks"], m["gate_passes"], m["first_pass_time"]) == (0, 0, None)
        assert m["delivery_effective"] == "notify"
        # no channel that records: communication and waits are not counted
        assert m["comm"] == {}
        assert m["waits"] is m["waits_by_outcome"] is m["wait_time"] is m["idle_time"] is None
    assert (metrics["notify_unwired"], metrics["tools_unwired"]) == ([], [])


def test_steps_to_answer_is_null_without_an_answer(tmp_path: Path) -> None:
    sample = helpers.run(
        swarm(member(react, name="w"), channels=[]),
        {"w": [{"text": "no", "stop_reason": "model_length"}]},
        tmp_path,
    )
    metrics = sample.store["inspect_swarm:metrics"]
    assert metrics["steps_to_answer"] is None
    assert metrics["longest_member_steps"] == 1
    assert metrics["never_acted"] == []
