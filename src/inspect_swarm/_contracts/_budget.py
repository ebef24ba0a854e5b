"""The budget model: the swarm's caps, how they derive from the sample's limits and how they
split between members, and the budget as a member sees it."""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from inspect_ai.util import Limit, sample_limits
from inspect_ai.util._limit import TokenLimit, parse_token_limit
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

Split: TypeAlias = Literal["pool", "equal"] | tuple[float, ...]
"""How the cost and token caps are divided between members."""

CapKind: TypeAlias = Literal["cost", "tokens"]
"""A kind of cap that a split divides (time is never split)."""


class Budget(BaseModel):
    """The swarm-wide budget: caps on cost, tokens and time.

    A cap left at `None` comes from the sample's limit of the same kind when the swarm starts:
    that limit less the fraction `reserve`, less what the sample has used already. A cap is a
    stopping rule. Once the swarm reaches one, it stops its members, waits up to `grace` seconds
    while they finish the calls they have in flight, and then cancels any member still running
    (with a sample time limit, the wait is at most half of the time left).

    Its fields are plain values: any of them can come from a task parameter, and the log tells
    apart two budgets that differ in a single field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    cost: float | None = None
    """Swarm cost cap in dollars. `None` derives it from the sample's cost limit."""

    tokens: int | str | None = None
    """The swarm's token cap: a count, or a string that inspect_ai's `parse_token_limit()` reads,
    such as `"output:1m"`, whose metering type the cap keeps. `None` derives it from the sample's
    token limit, metered as that limit is."""

    time: float | None = None
    """Seconds after which the swarm stops its members. `None` derives it from the sample's time
    limit."""

    reserve: float = 0.05
    """Fraction of each sample limit held back when a cap is derived."""

    split: Literal["pool", "equal"] | tuple[float, ...] = "pool"
    """Who may spend the cost and token caps: `"pool"` lets any member spend all of them,
    `"equal"` gives each member the same share, and a tuple gives one weight per member, in
    roster order, each share in proportion to its weight. A member stops when its share is spent;
    what a member leaves unspent stays unspent, no one else gets it."""

    grace: float = 120.0
    """The longest a stop waits, in seconds, for members to finish the calls they have in flight
    before it cancels them; with a sample time limit, at most half of the time left."""

    @field_validator("cost", "time", mode="before")
    @classmethod
    def _positive_cap(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return value
        field = str(info.field_name)
        unit = "dollars" if field == "cost" else "seconds"
        _check_number(field, value, f"a positive number of {unit}, or None to derive it")
        if value <= 0:
            _fail(field, value, "must be positive (None derives the cap from the sample's limit)")
        return value

    @field_validator("tokens", mode="before")
    @classmethod
    def _token_cap(cls, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, str):
            try:
                parse_token_limit(value)
            except ValueError as ex:
                _fail(
                    "tokens",
                    value,
                    f"is not a token limit ({ex}). Use a count such as "
                    '100000 or "500k", or a metered count such as "output:1m"',
                )
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            _fail(
                "tokens",
                value,
                "must be a positive whole number of tokens, a string such as "
                '"output:1m", or None to derive it from the sample\'s token limit',
            )
        return value

    @field_validator("reserve", mode="before")
    @classmethod
    def _reserve(cls, value: Any) -> Any:
        _check_number("reserve", value, "a fraction in [0, 1)")
        if not 0 <= value < 1:
            _fail(
                "reserve",
                value,
                "must be in [0, 1): the fraction of each sample limit held back, e.g. 0.05",
            )
        return value

    @field_validator("grace", mode="before")
    @classmethod
    def _grace(cls, value: Any) -> Any:
        _check_number("grace", value, "seconds, 0 or more")
        if value < 0:
            _fail("grace", value, "must be 0 or more seconds (0 cancels at once after a stop)")
        return value

    @field_validator("split", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if value in ("pool", "equal"):
            return value
        if isinstance(value, list | tuple) and value:
            for weight in value:
                if (
                    isinstance(weight, bool)
                    or not isinstance(weight, int | float)
                    or not math.isfinite(weight)
                    or weight <= 0
                ):
                    _fail(
                        "split",
                        value,
                        "has a weight that is not a positive number. Give "
                        "one positive weight per member, e.g. (1, 1, 2)",
                    )
            return tuple(float(weight) for weight in value)
        _fail(
            "split",
            value,
            'must be "pool", "equal" or a tuple of positive weights, one per '
            "member in roster order, e.g. (1, 1, 2)",
        )


def _check_number(field: str, value: Any, expected: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _fail(field, value, f"must be {expected}")


def _fail(field: str, value: Any, problem: str) -> Any:
    raise ValueError(f"Budget({field}=...): {field}={value!r} {problem}.")


def check_split(split: Split, n: int) -> None:
    """Refuse weights that do not give one weight to each of the `n` members (at swarm() time)."""
    if isinstance(split, tuple) and len(split) != n:
        raise ValueError(
            f"Budget(split=...): split={split!r} has {len(split)} weights for {n} members. Give "
            "one weight per member, in roster order."
        )


@dataclass(frozen=True)
class Caps:
    """The caps a swarm applies: derived from the sample's limits or given."""

    cost: float | None
    tokens: int | None
    token_type: str
    time: float | None

    def get(self, kind: CapKind) -> float | None:
        return self.cost if kind == "cost" else self.tokens

    def as_dict(self) -> dict[str, float | None]:
        return {"cost": self.cost, "tokens": self.tokens, "time": self.time}


def derive_caps(budget: Budget) -> Caps:
    """The swarm's caps, inside a running sample: each explicit value, else the sample's limit
    less what it has used and less `reserve` of the limit."""
    limits = sample_limits()
    tokens, token_type = _token_cap(budget, limits.token)
    return Caps(
        cost=budget.cost if budget.cost is not None else _derived(limits.cost, budget.reserve),
        tokens=tokens,
        token_type=token_type,
        time=budget.time if budget.time is not None else _derived(limits.time, budget.reserve),
    )


def _token_cap(budget: Budget, limit: Limit) -> tuple[int | None, str]:
    if budget.tokens is None:
        derived = _derived(limit, budget.reserve)
        # the cap meters what the sample's limit meters
        return (None if derived is None else math.floor(derived)), getattr(limit, "type", "all")
    parsed = parse_token_limit(budget.tokens) if isinstance(budget.tokens, str) else budget.tokens
    if isinstance(parsed, TokenLimit):
        return parsed.tokens, parsed.type
    return parsed, "all"


def _derived(limit: Limit, reserve: float) -> float | None:
    if limit.limit is None:
        return None
    return max(0.0, limit.limit * (1 - reserve) - limit.usage)


def effective_grace(budget: Budget) -> float:
    """The grace period: `budget.grace`, capped at half the sample's remaining time."""
    time = sample_limits().time
    if time.limit is None:
        return budget.grace
    return min(budget.grace, max(0.0, time.limit - time.usage) / 2)


def split_shares(cap: float, split: Split, n: int) -> list[float] | None:
    """Each member's share of `cap` in roster order, or None for a pool.

    Shares are rounded so they sum exactly to the cap: whole tokens for an integer cap, and
    nano-dollars for a cost cap.
    """
    if split == "pool":
        return None
    weights = [1.0] * n if split == "equal" else list(split)
    check_split(tuple(weights), n)
    if isinstance(cap, int):
        return [float(share) for share in _apportion(cap, weights)]
    units = _apportion(round(cap * 1e9), weights)
    return [unit / 1e9 for unit in units]


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    # largest remainder: floor every exact share, then hand out what is left by remainder
    exact = [total * w / sum(weights) for w in weights]
    shares = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: shares[i] - exact[i])
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def budget_preamble(caps: Caps, split: Split, n: int, index: int) -> str | None:
    """The preamble sentence on the swarm's caps and how they are split, or None with no cap."""
    amounts = _amounts(caps.cost, caps.tokens, caps.token_type)
    time = f" The swarm stops after {caps.time:,.0f} seconds." if caps.time is not None else ""
    if not amounts:
        return time.strip() or None
    if split == "pool" or n == 1:
        who = "you" if n == 1 else f"all {n} members, and any member may spend all of it"
        return f"The swarm's budget is {amounts}, shared by {who}.{time}"
    share = _amounts(
        _share(caps.cost, split, n, index), _share(caps.tokens, split, n, index), caps.token_type
    )
    return (
        f"The swarm's budget of {amounts} is split between its {n} members, and your share is "
        f"{share}. When you use up your share you stop, and what you leave is not given to the "
        f"others.{time}"
    )


def _share(cap: float | None, split: Split, n: int, index: int) -> float | None:
    shares = split_shares(cap, split, n) if cap is not None else None
    return shares[index] if shares is not None else None


def _amounts(cost: float | None, tokens: float | None, token_type: str) -> str:
    parts = []
    if cost is not None:
        parts.append(format_cost(cost))
    if tokens is not None:
        parts.append(f"{tokens:,.0f} {token_noun(token_type)}")
    return " and ".join(parts)


def format_cost(cost: float) -> str:
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"


def token_noun(token_type: str) -> str:
    if token_type == "all":
        return "tokens"
    if token_type == "output":
        return "output tokens"
    return f"tokens (metered as {token_type})"


@dataclass(frozen=True)
class BudgetUsage:
    """One capped kind of the swarm's budget, and what has been used of it."""

    cap: float
    """The swarm's cap: dollars, tokens or seconds."""

    used: float
    """What the whole swarm has used of the cap so far."""

    share: float | None = None
    """The calling member's part of the cap under a split budget; `None` for a pool, when the
    caller is not a member, and always for time (a time cap is never split)."""

    share_used: float | None = None
    """What the member has used of its share, when it has one."""


@dataclass(frozen=True)
class SwarmBudget:
    """The swarm's budget as a member sees it, from `swarm_budget()`."""

    split: Split
    """How the cost and token caps are divided between members, as `Budget.split`."""

    cost: BudgetUsage | None
    """The cost cap in dollars, or `None` when the swarm has none."""

    tokens: BudgetUsage | None
    """The token cap, or `None` when the swarm has none."""

    token_type: str
    """The tokens the token cap meters: `all`, or a metering type such as `output`."""

    time: BudgetUsage | None
    """The time cap in seconds, with how long the swarm has run as its use; `None` without a
    time cap."""
