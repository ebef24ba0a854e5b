"""The spec's example controllers and member builder, as written in the user guide."""

from collections.abc import Sequence
from contextlib import aclosing

from inspect_ai.agent import Agent, AgentAttempts, AgentState, agent, react
from inspect_ai.scorer import Value, value_to_float
from inspect_ai.util import LimitExceededError

from inspect_swarm import (
    Controller,
    MemberInfo,
    StopReason,
    SwarmControl,
    swarm_controller,
)


@swarm_controller
def escalate(first: str = "fast") -> Controller:
    """Start one member; start the others only if it ends without a submission."""

    def check(roster: Sequence[MemberInfo]) -> None:
        if first not in [m.name for m in roster]:
            raise ValueError(f"escalate(): no member is named {first!r}.")

    async def run(swarm: SwarmControl) -> StopReason:
        swarm.start(first)
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if event.submitted:
                    return "submitted"
        for m in swarm.members:
            if m.state == "pending":
                swarm.start(m)
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if event.submitted:
                    return "submitted"
        return "all_done"

    return Controller(run, check=check)


@swarm_controller
def prefer(role: str) -> Controller:
    """Answer with the first submission from a member with this role, if any."""

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
        chosen = False
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if not chosen and event.submitted and swarm.member(event.member).role == role:
                    swarm.choose_answer(event.member, reason=f"first {role} to submit")
                    chosen = True
        return "all_done"

    return Controller(run)


@swarm_controller
def until_proved() -> Controller:
    """Start every member, and stop the swarm when the first one ends `submitted`."""

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if event.submitted:
                    return "proved"
        return "all_done"

    return Controller(run)


@agent
def checked_solver(attempts: int = 5) -> Agent:
    """A `react()` member that returns normally only when one of its submissions passed the task's scorer."""
    passed = False
    to_float = value_to_float()

    def score_value(value: Value) -> float:
        nonlocal passed
        result = to_float(value)
        passed = passed or result == 1.0
        return result

    inner = react(attempts=AgentAttempts(attempts, score_value=score_value))

    async def execute(state: AgentState) -> AgentState:
        state = await inner(state)
        if not passed:
            # with no `source`, this ends only this member, as member_limit:custom
            raise LimitExceededError(
                "custom",
                value=0,
                limit=0,
                message="returned without a passing check",
            )
        return state

    return execute
