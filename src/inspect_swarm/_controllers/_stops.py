"""Stop conditions: when a controller that starts every member ends the swarm.

Each condition watches the swarm's events and names a stop reason when it is met; `any_of()`
and `all_of()` (or `|` and `&`) compose them. `run_until()` is the controller's loop that
`leaderless()`, `verified()` and `quiescence()` share.
"""

from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import Any, Literal

import anyio
from inspect_ai._util.registry import registry_value
from inspect_ai.scorer import Scorer
from pydantic import BaseModel, ConfigDict, SerializeAsAny, field_serializer

from .._contracts._control import (
    AllWaiting,
    MemberEnded,
    ModelCalled,
    RecordDelivered,
    SwarmControl,
    SwarmEvent,
    TurnEnded,
)
from .._contracts._controller import Controller, FinalName, StopReason

StopWatch = Callable[[SwarmControl, SwarmEvent], Awaitable[StopReason | None]]
"""A stop condition in one run: called with each event of the kinds it watches, it returns the
stop reason once the condition is met, else `None`."""


class StopCondition(BaseModel):
    """When the swarm is done: a condition on its events, composable with `any_of()` and
    `all_of()`, or `|` and `&`.

    A condition holds configuration only, like a `Controller`: `watch()` gives each run its
    own state. The log records a condition by its fields.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    condition: str
    """Which condition it is."""

    def events(self) -> tuple[type[SwarmEvent], ...]:
        """The kinds of event the condition watches."""
        return (MemberEnded,)

    def watch(self) -> StopWatch:
        """The condition's state for one run."""
        raise NotImplementedError

    def __or__(self, other: "StopCondition") -> "StopCondition":
        return any_of(self, other)

    def __and__(self, other: "StopCondition") -> "StopCondition":
        return all_of(self, other)


class _Submission(StopCondition):
    condition: Literal["submission"] = "submission"

    def watch(self) -> StopWatch:
        async def watch(swarm: SwarmControl, event: SwarmEvent) -> StopReason | None:
            submitted = isinstance(event, MemberEnded) and event.submitted
            return "submitted" if submitted else None

        return watch


class _VerifiedPass(StopCondition):
    condition: Literal["verified_pass"] = "verified_pass"
    check: Any = None

    @field_serializer("check")
    def _check_name(self, check: Any) -> Any:
        return registry_value(check) if check is not None else None

    def watch(self) -> StopWatch:
        async def watch(swarm: SwarmControl, event: SwarmEvent) -> StopReason | None:
            if not (isinstance(event, MemberEnded) and event.submitted):
                return None
            if not await swarm.verify(event.member, self.check):
                return None
            swarm.choose_answer(event.member, reason="the first submission to pass the check")
            return "verified"

        return watch


class _Quiescent(StopCondition):
    condition: Literal["quiescent"] = "quiescent"
    settle: float

    def events(self) -> tuple[type[SwarmEvent], ...]:
        return (AllWaiting,)

    def watch(self) -> StopWatch:
        async def watch(swarm: SwarmControl, event: SwarmEvent) -> StopReason | None:
            if not isinstance(event, AllWaiting) or event.outstanding:
                return None
            # the waits stay held while the controller holds the event
            await anyio.sleep(self.settle)
            if swarm.waiting_since == event.time and not swarm.outstanding():
                return "quiescence"
            return None

        return watch


class _Stall(StopCondition):
    condition: Literal["stall"] = "stall"
    calls: int

    def events(self) -> tuple[type[SwarmEvent], ...]:
        return (ModelCalled, RecordDelivered, MemberEnded, TurnEnded)

    def watch(self) -> StopWatch:
        calls = 0

        async def watch(swarm: SwarmControl, event: SwarmEvent) -> StopReason | None:
            nonlocal calls
            if isinstance(event, ModelCalled):
                calls += 1
            elif isinstance(event, RecordDelivered) or (
                isinstance(event, MemberEnded | TurnEnded) and event.submitted
            ):
                calls = 0
            return "stalled" if calls >= self.calls else None

        return watch


class _Composed(StopCondition):
    conditions: tuple[SerializeAsAny[StopCondition], ...]

    def events(self) -> tuple[type[SwarmEvent], ...]:
        kinds = (kind for c in self.conditions for kind in c.events())
        return tuple(dict.fromkeys(kinds))


class _AnyOf(_Composed):
    condition: Literal["any_of"] = "any_of"

    def watch(self) -> StopWatch:
        watches = [(c.events(), c.watch()) for c in self.conditions]

        async def watch(swarm: SwarmControl, event: SwarmEvent) -> StopReason | None:
            for kinds, each in watches:
                reason = await each(swarm, event) if isinstance(event, kinds) else None
                if reason is not None:
                    return reason
            return None

        return watch


class _AllOf(_Composed):
    condition: Literal["all_of"] = "all_of"

    def watch(self) -> StopWatch:
        # each condition counts once met, as AutoGen's AND of termination conditions does
        waiting = [(c.events(), c.watch()) for c in self.conditions]

        async def watch(swarm: SwarmControl, event: SwarmEvent) -> StopReason | None:
            for pending in list(waiting):
                kinds, each = pending
                reason = await each(swarm, event) if isinstance(event, kinds) else None
                if reason is not None:
                    waiting.remove(pending)
                    if not waiting:
                        return reason
            return None

        return watch


def submission() -> StopCondition:
    """Met when a member ends with a submission; the stop reason is `submitted`."""
    return _Submission()


def verified_pass(check: Scorer | None = None) -> StopCondition:
    """Met when a member ends with a submission that passes a check; the stop reason is `verified`.

    Each submission is checked as the member ends, with `SwarmControl.verify()`, so the checks
    count in the member's `gate_checks`, `gate_passes` and `first_pass_time`. The first
    submission that passes becomes the swarm's answer.

    Args:
        check: The scorer that checks a submission. `None` uses the task's first scorer. A
            score of 1.0 (under Inspect's `value_to_float()`) passes.
    """
    return verified_condition(check, "verified_pass")


def verified_condition(check: Scorer | None, call: str) -> StopCondition:
    """`verified_pass(check)`, its refusal naming `call`."""
    if check is not None and not callable(check):
        raise TypeError(
            f"{call}(check=...): {check!r} is not a scorer. Pass a scorer such as match(), or "
            "None for the task's own."
        )
    return _VerifiedPass(check=check)


def quiescent(settle: float = 2.0) -> StopCondition:
    """Met when every member has been waiting for `settle` seconds and no channel holds open
    work; the stop reason is `quiescence`.

    A member waits in `swarm_wait`, which the swarm's channels with waits give it, such as
    `shared_memory()`; ended and not yet started members count as waiting. While the
    condition settles, the waits stay blocked, so no member acts in the meantime. If a member
    stops waiting, or a channel reports open work (`SwarmControl.outstanding()`), the waits end as
    usual with `all_waiting`.

    Args:
        settle: Seconds every member must stay waiting before the swarm stops.
    """
    return quiescent_condition(settle, "quiescent")


def quiescent_condition(settle: float, call: str) -> StopCondition:
    """`quiescent(settle)`, its refusal naming `call`."""
    if isinstance(settle, bool) or not isinstance(settle, int | float) or settle < 0:
        raise ValueError(
            f"{call}(settle=...): settle must be a number of seconds, 0 or more, not {settle!r}."
        )
    return _Quiescent(settle=float(settle))


def stall(calls: int) -> StopCondition:
    """Met after `calls` model calls across the swarm with no new record and no submission;
    the stop reason is `stalled`, recorded as `controller:stalled`.

    A record is anything a channel delivers, such as a write to the board; a submission is a
    member's end (or turn) with one.

    Args:
        calls: Model calls of the members, their subagents' included, without progress.
    """
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise ValueError(
            f"stall(calls=...): calls must be a whole number of model calls, 1 or more, not "
            f"{calls!r}."
        )
    return _Stall(calls=calls)


def any_of(*conditions: StopCondition) -> StopCondition:
    """Met when any of the conditions is met, with that condition's stop reason.

    `a | b` is `any_of(a, b)`.

    Args:
        *conditions: The stop conditions.
    """
    return _AnyOf(conditions=_conditions("any_of", conditions))


def all_of(*conditions: StopCondition) -> StopCondition:
    """Met once every condition has been met, each at its own time, with the stop reason of
    the one met last.

    `a & b` is `all_of(a, b)`.

    Args:
        *conditions: The stop conditions.
    """
    return _AllOf(conditions=_conditions("all_of", conditions))


def _conditions(call: str, conditions: Sequence[object]) -> tuple[StopCondition, ...]:
    if not conditions:
        raise ValueError(f"{call}(): give it at least one stop condition, e.g. {call}(stall(20)).")
    for c in conditions:
        if not isinstance(c, StopCondition):
            raise TypeError(
                f"{call}(): {c!r} is not a stop condition. Combine submission(), "
                "verified_pass(), quiescent(), stall() or other any_of()/all_of()."
            )
    if sum(_counts_verified(c) for c in conditions) > 1:
        raise ValueError(
            f"{call}(): verified_pass() is given more than once; it chooses the swarm's "
            "answer, so a stop can hold one."
        )
    return tuple(conditions)  # type: ignore[arg-type]


def _counts_verified(c: object) -> int:
    if isinstance(c, _VerifiedPass):
        return 1
    if isinstance(c, _Composed):
        return sum(_counts_verified(inner) for inner in c.conditions)
    return 0


def run_until(
    stop: StopCondition | None, final: FinalName | None, instructions: str | None = None
) -> Controller:
    """A controller that starts every member with the swarm's input and stops when `stop` is
    met, or with `all_done` when every member has ended first."""
    kinds = stop.events() if stop is not None else (MemberEnded,)

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
        watch = stop.watch() if stop is not None else None
        async with aclosing(swarm.events(*kinds)) as events:
            async for event in events:
                reason = await watch(swarm, event) if watch is not None else None
                if reason is not None:
                    return reason
        return "all_done"

    return Controller(run, final=final, instructions=instructions)
