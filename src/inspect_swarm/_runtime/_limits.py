"""A bridged member's own limits, enforced by metering.

A `LimitExceededError` raised inside the agent bridge ends the whole sample, so a bridged
member never runs under Inspect limits: the swarm meters its calls against the limits it was
given and cancels the member that reaches one, as Inspect's checks would end a native member.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from inspect_ai.model import ModelUsage
from inspect_ai.util import Limit
from inspect_ai.util._limit import _TokenMetering

from .._contracts._member import limit_type
from .._contracts._status import LimitType


@dataclass(frozen=True)
class MeteredLimits:
    """The member's limits, as amounts to compare with what its meter recorded."""

    tokens: tuple[tuple[float, _TokenMetering], ...] = ()
    cost: float | None = None
    turns: float | None = None
    messages: float | None = None
    time: float | None = None

    @classmethod
    def of(cls, limits: Sequence[Limit]) -> "MeteredLimits":
        amounts: dict[str, float | None] = {}
        tokens: list[tuple[float, _TokenMetering]] = []
        for limit in limits:
            kind = limit_type(limit)
            if limit.limit is None:
                continue
            if kind == "token":
                tokens.append((limit.limit, _TokenMetering(str(getattr(limit, "type", "all")))))
            elif kind is not None:
                amounts[kind] = limit.limit
        return cls(
            tokens=tuple(tokens),
            cost=amounts.get("cost"),
            turns=amounts.get("turn"),
            messages=amounts.get("message"),
            time=amounts.get("time"),
        )

    def exceeded(self, usage: ModelUsage, cost: float) -> LimitType | None:
        """The limit that usage went past, checked after each call (as Inspect does)."""
        return self._over(usage, cost, at_limit=False)

    def reached(
        self, usage: ModelUsage, cost: float, turns: int, messages: int
    ) -> LimitType | None:
        """The limit a new call with `messages` input messages may not start past, checked
        before the call: Inspect refuses a call at a token, cost or message limit, and the
        call after the last turn."""
        if self.turns is not None and turns >= self.turns:
            return "turn"
        if self.messages is not None and messages >= self.messages:
            return "message"
        return self._over(usage, cost, at_limit=True)

    def _over(self, usage: ModelUsage, cost: float, *, at_limit: bool) -> LimitType | None:
        def past(used: float, limit: float) -> bool:
            return used >= limit if at_limit else used > limit

        if any(past(metering.value(usage), limit) for limit, metering in self.tokens):
            return "token"
        if self.cost is not None and past(cost, self.cost):
            return "cost"
        return None
