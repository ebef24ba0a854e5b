"""The budget's enforcement in one run: what the swarm does when a call reaches a cap, a share
or a limit it meters, and when its time cap passes.

The meter counts and says which rule a call reached; this module acts on it. Before each model
call it refuses the call of a member the swarm has stopped, or that a metered limit ends; after
each charged call it ends the member (and, at a cap, the swarm).
"""

from collections.abc import Callable

import anyio
from inspect_ai.agent import current_agent_bridge_context

from .._contracts._budget import Budget, effective_grace
from .._contracts._status import SwarmStopReason, Verdict, member_limit
from ._member_run import MemberRun
from ._meter import SwarmMeter
from ._observe import SwarmObserver


class BudgetEnforcer:
    """Enforces the budget and the members' metered limits for one run of the swarm."""

    def __init__(
        self,
        budget: Budget,
        meter: SwarmMeter,
        observer: SwarmObserver,
        member: Callable[[str], MemberRun],
        stop_swarm: Callable[[SwarmStopReason], None],
        stopping: Callable[[], bool],
    ) -> None:
        self._budget = budget
        self._meter = meter
        self._observer = observer
        self._member = member
        self._stop_swarm = stop_swarm
        self._stopping = stopping

    def grace(self) -> float:
        """Seconds members have to finish their calls in flight after a stop."""
        return effective_grace(self._budget)

    async def time_cap(self, clock: Callable[[], float]) -> None:
        """Stop the swarm when its time cap passes (run as a task; returns at once with none)."""
        seconds = self._meter.caps.time
        if seconds is None:
            return
        await anyio.sleep(max(0.0, seconds - clock()))
        self._stop_swarm("swarm_time")

    def before_call(self, member: str | None, messages: int) -> None:
        """Refuse, by raising, a model call with `messages` input messages that `member` (its
        subagents and background work included) may no longer make."""
        if member is None:
            return
        m = self._member(member)
        if current_agent_bridge_context() is not None:
            m.bridge_call()
        if m.metered is not None:
            limit = m.metered.reached(
                self._meter.member_usage(m.name),
                self._meter.member_used(m.name, "cost"),
                self._observer.steps.get(m.name, 0),
                messages,
            )
            if limit is not None:
                m.stop(member_limit(limit))
        refusal = m.refusal(self._stopping())
        if refusal is not None:
            raise refusal

    def after_charge(self, member: str | None, verdict: Verdict | None) -> None:
        """A completed call of `member` (None outside every member) was charged and reached
        `verdict`: a bridged member past its own limit ends at once, a share ends the member, a
        cap ends the swarm. Raises the member's stop in the calling task."""
        m = self._member(member) if member is not None else None
        if m is not None and m.metered is not None:
            limit = m.metered.exceeded(
                self._meter.member_usage(m.name), self._meter.member_used(m.name, "cost")
            )
            if limit is not None:
                m.stop(member_limit(limit))
        if verdict is None:
            return
        if verdict == "swarm_cap":
            self._stop_swarm("swarm_cap")
        if m is not None:
            m.stop(verdict)
            refusal = m.refusal(self._stopping())
            if refusal is not None:
                raise refusal
