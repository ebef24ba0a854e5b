"""The budget's enforcement in one run, in one place: the caps the swarm applies and how they
split into shares, which rule a charged call reached, and what the swarm does about it.

The meter counts what calls used; the enforcer reads the counts. Before each model call it
refuses the call of a member the swarm has stopped, or that one of its metered limits ends;
after each charged call it ends the member at its share or its metered limit, and the swarm at
a cap; and it stops the swarm when the time cap passes.
"""

from collections.abc import Callable, Sequence

import anyio
from inspect_ai.agent import current_agent_bridge_context
from inspect_ai.model import ModelUsage
from inspect_ai.util._limit import _TokenMetering

from .._contracts._budget import (
    Budget,
    BudgetUsage,
    CapKind,
    Caps,
    SwarmBudget,
    derive_caps,
    effective_grace,
    split_shares,
)
from .._contracts._schema import Meter, SwarmLedger
from .._contracts._status import EndedBy, SwarmStopReason, Verdict, member_limit
from .._contracts._summary import Reach
from ._member_run import MemberRun
from ._meter import SwarmMeter

_SPLIT_KINDS: tuple[CapKind, ...] = ("cost", "tokens")


class BudgetEnforcer:
    """Enforces the budget, and the limits the swarm meters for bridged members, in one run."""

    def __init__(
        self,
        budget: Budget,
        meter: SwarmMeter,
        members: Sequence[MemberRun],
        stop_swarm: Callable[[SwarmStopReason], None],
        stopping: Callable[[], bool],
    ) -> None:
        self._budget = budget
        self._meter = meter
        self._members = list(members)
        self._stop_swarm = stop_swarm
        self._stopping = stopping
        self._caps = Caps(cost=None, tokens=None, token_type="all", time=None)
        self._metering = _TokenMetering("all")
        # each kind's shares, by the member's roster index
        self._shares: dict[CapKind, list[float]] = {}
        # the member whose call first reached a cap
        self._cap_by: str | None = None

    @property
    def caps(self) -> Caps:
        """The caps the swarm applies (all None until `open()`)."""
        return self._caps

    def open(self) -> None:
        """Derive the caps and shares, in the sample, when the swarm starts (after the meter's
        `open()`, so that a ledger made after a failed open still measures the swarm).

        Raises:
            ValueError: A cost cap with a member's model that has no cost data.
        """
        caps = derive_caps(self._budget)
        if caps.cost is not None:
            self._meter.check_cost_data()
        self._caps = caps
        self._metering = _TokenMetering(caps.token_type)
        for kind in _SPLIT_KINDS:
            cap = caps.get(kind)
            shares = (
                split_shares(cap, self._budget.split, len(self._members))
                if cap is not None
                else None
            )
            if shares is not None:
                self._shares[kind] = shares

    # ---- what has been used, against what ----------------------------------------------

    def used(self, kind: CapKind) -> float:
        """What the whole swarm has used of a kind: dollars, or tokens as the token cap meters."""
        return self._amount(self._meter.swarm, kind)

    def member_used(self, m: MemberRun, kind: CapKind) -> float:
        """What a member has used of a kind."""
        return self._amount(m.meter, kind)

    def share(self, m: MemberRun, kind: CapKind) -> float | None:
        """The member's share of a cap, or None when the cap is not split."""
        shares = self._shares.get(kind)
        return shares[m.spec.index] if shares is not None else None

    def verdict(self, m: MemberRun | None) -> Verdict | None:
        """The rule the swarm's usage has reached, if any: a cap beats the member's share."""
        for kind in _SPLIT_KINDS:
            cap = self._caps.get(kind)
            if cap is not None and self.used(kind) >= cap:
                return "swarm_cap"
        if m is None:
            return None
        for kind in _SPLIT_KINDS:
            share = self.share(m, kind)
            if share is not None and self.member_used(m, kind) >= share:
                return "share"
        return None

    def cap_reached(self, elapsed: float) -> Reach | None:
        """The cap the swarm has reached, with what it has used and the member whose call
        reached it first; the time cap once it has passed."""
        for kind in _SPLIT_KINDS:
            cap = self._caps.get(kind)
            if cap is not None and self.used(kind) >= cap:
                return Reach("cap", kind, cap, self.used(kind), self._cap_by, self._caps.token_type)
        time = self._caps.time
        if time is not None and elapsed >= time:
            return Reach("cap", "time", time, elapsed, None, self._caps.token_type)
        return None

    def share_reached(self, m: MemberRun) -> Reach | None:
        """The member's share it has reached, with what it has used."""
        for kind in _SPLIT_KINDS:
            share = self.share(m, kind)
            used = self.member_used(m, kind)
            if share is not None and used >= share:
                return Reach("share", kind, share, used, m.name, self._caps.token_type)
        return None

    def view(self, m: MemberRun | None, elapsed: float) -> SwarmBudget:
        """The budget as a member (None: outside every member) sees it, `swarm_budget()`."""

        def usage(kind: CapKind) -> BudgetUsage | None:
            cap = self._caps.get(kind)
            if cap is None:
                return None
            share = self.share(m, kind) if m is not None else None
            share_used = self.member_used(m, kind) if m is not None and share is not None else None
            return BudgetUsage(cap=cap, used=self.used(kind), share=share, share_used=share_used)

        time = self._caps.time
        return SwarmBudget(
            split=self._budget.split,
            cost=usage("cost"),
            tokens=usage("tokens"),
            token_type=self._caps.token_type,
            time=None if time is None else BudgetUsage(cap=time, used=elapsed),
        )

    def ledger(
        self,
        *,
        stop_reason: SwarmStopReason | None,
        ended_by: EndedBy | None,
        interrupted: bool,
        final_cancelled: bool,
        resumed: bool,
        elapsed: float,
    ) -> SwarmLedger:
        """The ledger of the run: the meter's, settled, with the budget, caps and overshoot."""
        self._meter.settle()
        return self._meter.ledger(
            budget=self._budget,
            caps=self._caps,
            overshoot=self._overshoot(elapsed),
            stop_reason=stop_reason,
            ended_by=ended_by,
            interrupted=interrupted,
            final_cancelled=final_cancelled,
            resumed=resumed,
        )

    # ---- enforcement -------------------------------------------------------------------

    def grace(self) -> float:
        """Seconds members have to finish their calls in flight after a stop."""
        return effective_grace(self._budget)

    async def time_cap(self, clock: Callable[[], float]) -> None:
        """Stop the swarm when its time cap passes (run as a task when there is one)."""
        seconds = self._caps.time
        assert seconds is not None
        await anyio.sleep(max(0.0, seconds - clock()))
        self._stop_swarm("swarm_time")

    def before_call(self, m: MemberRun, messages: int) -> None:
        """Refuse, by raising, a model call with `messages` input messages that the member (its
        subagents and background work included) may no longer make."""
        if current_agent_bridge_context() is not None:
            m.bridge_call()
        if m.metered is not None:
            limit = m.metered.reached(m.meter.usage, self.member_used(m, "cost"), m.steps, messages)
            if limit is not None:
                m.stop(member_limit(limit))
        refusal = m.refusal(self._stopping())
        if refusal is not None:
            raise refusal

    def charge(
        self, model: str, usage: ModelUsage, m: MemberRun | None, *, cached: bool
    ) -> Verdict | None:
        """Record a completed call in the meter, and say which rule it reached. A cache replay
        costs nothing and is not charged."""
        if cached:
            return None
        self._meter.charge(model, usage, m)
        return self.verdict(m)

    def after_charge(self, m: MemberRun | None, verdict: Verdict | None) -> None:
        """A completed call of `m` (None outside every member) was charged and reached
        `verdict`: a bridged member past its own limit ends at once, a share ends the member, a
        cap ends the swarm. Raises the member's stop in the calling task."""
        if m is not None and m.metered is not None:
            limit = m.metered.exceeded(m.meter.usage, self.member_used(m, "cost"))
            if limit is not None:
                m.stop(member_limit(limit))
        if verdict is None:
            return
        if verdict == "swarm_cap":
            if self._cap_by is None and m is not None:
                self._cap_by = m.name
            self._stop_swarm("swarm_cap")
        if m is not None:
            m.stop(verdict)
            refusal = m.refusal(self._stopping())
            if refusal is not None:
                raise refusal

    def _amount(self, meter: Meter, kind: CapKind) -> float:
        return meter.cost if kind == "cost" else self._metering.value(meter.usage)

    def _overshoot(self, elapsed: float) -> dict[str, float]:
        used = {"cost": self._meter.swarm.cost, "tokens": self.used("tokens"), "time": elapsed}
        return {
            kind: used[kind] - cap
            for kind, cap in self._caps.as_dict().items()
            if cap is not None and used[kind] > cap
        }
