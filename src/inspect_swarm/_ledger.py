from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from inspect_ai.event import ModelEvent
from inspect_ai.log import transcript
from inspect_ai.model import Model, ModelAPI, ModelUsage, compute_model_cost, get_model_info
from inspect_ai.model._model import _models, active_model, model_roles, sample_model_usage
from inspect_ai.model._model_info import _get_model_info_direct
from inspect_ai.util import sample_limits, store
from inspect_ai.util._limit import _TokenMetering, token_limit_tree
from pydantic import BaseModel, ConfigDict, Field

from ._budget import Budget, CapKind, Caps, derive_caps, split_shares
from ._context import current_member, current_phase

LEDGER_KEY = "inspect_swarm:ledger"
"""The sample store key of the ledger."""

Verdict: TypeAlias = Literal["swarm_cap", "share"]
"""The rule a call reached: one of the swarm's caps, or the member's share."""


class Meter(BaseModel):
    """Usage and cost recorded by one of the swarm's meters.

    A meter counts the model calls made in its context: one member's, the runtime's, the final
    step's, or the whole swarm's.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    usage: ModelUsage = Field(default_factory=ModelUsage)
    """Token usage of the calls recorded, except those made while token metering was suspended
    (approval and review calls)."""

    cost: float = 0.0
    """Cost in dollars of the priced calls recorded, suspended calls included."""

    suspended_cost: float = 0.0
    """The part of `cost` recorded while token metering was suspended (approval and review
    calls)."""


class Calls(BaseModel):
    """Counts of the model events in the swarm, or in one member's spans.

    `errored`, `no_usage` and `unpriced` count calls whose cost is missing, so any of them above
    zero makes the cost a lower bound.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    calls: int = 0
    """Model calls that completed, cache replays excluded."""

    cache_replays: int = 0
    """Model events replayed from the cache (`cache="read"`). They cost nothing."""

    errored: int = 0
    """Model calls that ended in an error or were cancelled, plus the requests a provider's
    client retried inside one call. Their usage is unknown."""

    no_usage: int = 0
    """Model calls that completed with output but no usage."""

    unpriced: int = 0
    """Model calls that completed with usage but no cost (`total_cost` is `None`)."""


class MemberLedger(BaseModel):
    """One member's entry in the swarm's ledger."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """The member's name."""

    status: str | None
    """How the member ended (`submitted`, `swarm_cap`, ...), or `None` for a member never
    started."""

    bridged: bool
    """The member runs a CLI agent through Inspect's agent bridge."""

    meter: Meter
    """Usage and cost of the calls made in the member's context."""

    calls: Calls
    """Model events in the member's spans."""

    cancelled: bool
    """The member's agent was cancelled, or the swarm's hard stop cancelled its background drain
    after the agent had returned. A hard stop during the drain keeps the agent's status, so
    `cancelled` can be `True` with `status="submitted"`."""

    background_started: int
    """Tasks the member's agent started with `background()`, such as `deepagent()` background
    subagents, and any its factory started (which makes the member `errored`)."""

    background_cancelled: int
    """Of `background_started`, the tasks that were cancelled: still running when the member's
    drain ended, cancelled by an error from the member's work or by the hard stop, or started
    by its factory (the swarm cancels those before they run)."""


class SwarmLedger(BaseModel):
    """Realized usage and cost of one run of the swarm, and how complete they are.

    The swarm writes its ledger once, when it ends, to the sample store as `inspect_swarm:ledger`
    and as an `InfoEvent` with source `inspect_swarm`. Read it from a sample with
    `swarm_ledger()`.

    The store entry's shape follows `version`. This inspect_swarm reads version 1 only.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    version: Literal[1] = 1
    """Format version of the ledger."""

    budget: Budget
    """The swarm's budget as configured."""

    caps: dict[str, float | None]
    """The swarm's caps, derived or explicit, keyed by `cost` (dollars), `tokens` and `time`
    (seconds). `None` for a kind with no cap."""

    sample_limits: dict[str, float | None]
    """The sample's limits when the swarm started, keyed by `token`, `cost`, `message`, `turn`,
    `working` and `time`. `None` for a limit not set."""

    members: list[MemberLedger]
    """Each member, in roster order."""

    runtime: Meter
    """Calls made by the swarm's runtime, such as the controller's."""

    final: Meter
    """Calls made by the final step, which chooses the answer."""

    swarm: Meter
    """Every call in the swarm's context: the members, the runtime, the final step and anything
    else."""

    calls: Calls
    """Model events in the swarm's span tree: the members, the runtime and the final step."""

    unpriced_calls_recorded: int
    """Calls the swarm meter recorded with usage but no cost."""

    sample_delta: ModelUsage
    """The sample's model usage over the swarm's lifetime, summed over its models."""

    unattributed: ModelUsage
    """What the sample used over the swarm's lifetime that the swarm meter did not record: tokens
    are `sample_delta` minus `swarm.usage`, and `total_cost` is `sample_delta`'s cost minus
    `swarm.cost`."""

    unpriced_models: list[str]
    """Models in `sample_delta` with tokens but no cost."""

    native_compaction_classes: list[str]
    """Loaded `ModelAPI` classes that override `compact()`, when the swarm started or ended.
    Native compaction emits no event, so the ledger cannot count its calls."""

    overshoot: dict[str, float]
    """How far usage at the end went past each cap, keyed by `cost`, `tokens` and `time`. Only
    kinds over their cap appear."""

    stop_reason: str | None
    """The reason the swarm stopped its members, from the first stop begun. `None` when no stop
    began."""

    ended_by: str | None
    """The sample limit (`sample_limit:<type>`) or operator interrupt (`operator`) that ended the
    swarm, even during its own stop. `unknown` when an outside cause may have ended it but cannot
    be named. `None` when nothing from outside ended it."""

    interrupted: bool
    """The swarm did not finish: an error, a limit or a cancellation ended it before or during its
    final step."""

    final_cancelled: bool
    """The final step was cancelled."""

    resumed: bool
    """The sample resumed from a checkpoint, so the swarm restarted its caps from zero."""

    total_complete: bool
    """No call is known to be missing from the swarm's usage and cost: no member, member
    background task or final step was cancelled, the swarm was not interrupted, every call
    completed with priced usage, every model in `sample_delta` is priced, and no loaded model
    class compacts natively."""

    attribution_complete: bool
    """`total_complete`, and the swarm meter recorded all the sample used over the swarm's
    lifetime: `unattributed` is zero, to within rounding."""


@dataclass(frozen=True)
class MemberOutcome:
    """How a member ended, as the runtime saw it, for its ledger entry."""

    name: str
    status: str | None
    cancelled: bool = False
    background_started: int = 0
    background_cancelled: int = 0


@dataclass(frozen=True)
class _Uncharged:
    """A completed call the usage hook has not charged yet, and whose meter it would charge."""

    model: str
    usage: ModelUsage
    meter: Meter | None
    suspended: bool


# costs this close to zero are rounding, not usage
_COST_EPSILON = 1e-9


class SwarmMeter:
    """The swarm's own meter: charges completed calls against the caps and shares, counts the
    model events of the swarm, and writes the ledger when the swarm ends."""

    def __init__(
        self,
        budget: Budget,
        members: Sequence[tuple[str, bool]],
        models: Sequence[str | Model],
    ) -> None:
        self.budget = budget
        self._bridged = dict(members)
        self._models = list(models)
        self._caps = Caps(cost=None, tokens=None, token_type="all", time=None)
        self._metering = _TokenMetering("all")
        self._shares: dict[CapKind, dict[str, float]] = {}
        self._start_usage: dict[str, ModelUsage] | None = None
        self._sample_limits: dict[str, float | None] = dict.fromkeys(_LIMIT_KINDS)
        self._compaction: set[str] = set()
        self._members = {name: Meter() for name in self._bridged}
        self._phases: dict[str, Meter] = {"runtime": Meter(), "final": Meter()}
        self._swarm = Meter()
        self._unpriced_recorded = 0
        self._member_calls = {name: Calls() for name in self._bridged}
        self._calls = Calls()
        self._seen: set[str] = set()
        # usage objects of completed calls not priced yet when observed: inspect sets the cost on
        # the same object after notifying subscribers, so they are counted when the ledger is made
        self._cost_pending: list[tuple[str | None, ModelUsage]] = []
        # completed calls by the id of their usage object, which the usage hook is given, until
        # the hook charges them: inspect raises a token or cost limit error before the hook, so
        # the call that reaches a limit is charged only when the ledger is made
        self._uncharged: dict[int, _Uncharged] = {}

    @property
    def caps(self) -> Caps:
        """The caps the swarm applies (all None until `open()`)."""
        return self._caps

    def open(self) -> None:
        """Start metering, in the sample, when the swarm starts.

        Raises:
            ValueError: A cost cap with a member's model that has no cost data.
        """
        # first, so that a ledger made after a failed open still measures the swarm's lifetime
        self._start_usage = dict(sample_model_usage())
        limits = sample_limits()
        self._sample_limits = {kind: getattr(limits, kind).limit for kind in _LIMIT_KINDS}
        self._compaction = _native_compaction_classes(self._models)
        caps = derive_caps(self.budget)
        if caps.cost is not None:
            _check_cost_data(self._models)
        self._caps = caps
        self._metering = _TokenMetering(caps.token_type)
        names = list(self._bridged)
        for kind in ("cost", "tokens"):
            cap = caps.get(kind)
            shares = split_shares(cap, self.budget.split, len(names)) if cap is not None else None
            if shares is not None:
                self._shares[kind] = dict(zip(names, shares, strict=True))

    def charge(self, model: str, usage: ModelUsage, *, cached: bool = False) -> Verdict | None:
        """Record a completed call, in the calling task, and say which rule it reached.

        A cache replay costs nothing and is not charged. The swarm's caps beat the share.
        """
        if cached:
            return None
        self._uncharged.pop(id(usage), None)
        member = current_member()
        self._record_call(model, usage, self._meter_of(member), token_limit_tree.is_suspended())
        return self._verdict(member)

    def observe(self, event: ModelEvent) -> None:
        """Count a model event of the swarm, in the emitting task (each completed event once)."""
        if event.pending or event.uuid in self._seen:
            return
        if event.uuid is not None:
            self._seen.add(event.uuid)
        member = current_member()
        usage = event.output.usage
        for calls in (self._calls, self._member_calls.get(member or "")):
            if calls is not None:
                _count(calls, event, usage)
        if event.error is None and event.cache != "read" and usage:
            if usage.total_cost is None:
                self._cost_pending.append((member, usage))
            self._uncharged[id(usage)] = _Uncharged(
                event.model, usage, self._meter_of(member), token_limit_tree.is_suspended()
            )

    def used(self, kind: CapKind) -> float:
        """What the whole swarm has used of a kind: dollars, or tokens as the token cap meters."""
        return self._amount(self._swarm, kind)

    def member_used(self, member: str, kind: CapKind) -> float:
        """What a member has used of a kind."""
        return self._amount(self._members[member], kind)

    def member_usage(self, member: str) -> ModelUsage:
        """The token usage a member's calls recorded."""
        return self._members[member].usage

    def share(self, member: str, kind: CapKind) -> float | None:
        """The member's share of a cap, or None when the cap is not split."""
        return self._shares.get(kind, {}).get(member)

    def ledger(
        self,
        *,
        members: Sequence[MemberOutcome],
        stop_reason: str | None,
        ended_by: str | None,
        interrupted: bool,
        final_cancelled: bool,
        resumed: bool,
        elapsed: float,
    ) -> SwarmLedger:
        """The ledger of the swarm's run. Synchronous, so it can be made on every path."""
        self._settle()
        outcomes = {m.name: m for m in members}
        unpriced = [member for member, usage in self._cost_pending if usage.total_cost is None]
        calls = self._calls.model_copy(update={"unpriced": len(unpriced)})
        entries = [
            self._member_ledger(name, outcomes.get(name), unpriced.count(name))
            for name in self._bridged
        ]
        delta = self._sample_delta()
        unattributed = _unattributed(delta, self._swarm)
        unpriced_models = sorted(
            model
            for model, usage in self._delta_by_model().items()
            if usage.total_tokens > 0 and usage.total_cost is None
        )
        compaction = sorted(self._compaction | _native_compaction_classes(self._models))
        total_complete = not (
            interrupted
            or final_cancelled
            or any(m.cancelled or m.background_cancelled for m in members)
            or calls.errored
            or calls.no_usage
            or calls.unpriced
            or self._unpriced_recorded
            or unpriced_models
            or compaction
        )
        return SwarmLedger(
            budget=self.budget,
            caps=self._caps.as_dict(),
            sample_limits=self._sample_limits,
            members=entries,
            runtime=self._phases["runtime"].model_copy(deep=True),
            final=self._phases["final"].model_copy(deep=True),
            swarm=self._swarm.model_copy(deep=True),
            calls=calls,
            unpriced_calls_recorded=self._unpriced_recorded,
            sample_delta=delta,
            unattributed=unattributed,
            unpriced_models=unpriced_models,
            native_compaction_classes=compaction,
            overshoot=self._overshoot(elapsed),
            stop_reason=stop_reason,
            ended_by=ended_by,
            interrupted=interrupted,
            final_cancelled=final_cancelled,
            resumed=resumed,
            total_complete=total_complete,
            attribution_complete=total_complete and _is_zero(unattributed),
        )

    def _record_call(
        self, model: str, usage: ModelUsage, meter: Meter | None, suspended: bool
    ) -> None:
        """Record a completed call in the swarm's meter and in `meter` (its member's or phase's)."""
        cost = usage.total_cost if usage.total_cost is not None else _price(model, usage)
        if cost is None:
            self._unpriced_recorded += 1
        elif usage.total_cost is None:
            usage = usage.model_copy(update={"total_cost": cost})
        for recorded in (self._swarm, meter):
            if recorded is not None:
                _record(recorded, usage, cost, suspended)

    def _settle(self) -> None:
        """Charge the completed calls the usage hook never charged, such as each call that
        reached a token or cost limit."""
        for call in self._uncharged.values():
            self._record_call(call.model, call.usage, call.meter, call.suspended)
        self._uncharged.clear()

    def _meter_of(self, member: str | None) -> Meter | None:
        if member is not None:
            return self._members.get(member)
        phase = current_phase()
        return self._phases[phase] if phase is not None else None

    def _amount(self, meter: Meter, kind: CapKind) -> float:
        return meter.cost if kind == "cost" else self._metering.value(meter.usage)

    def _verdict(self, member: str | None) -> Verdict | None:
        kinds: tuple[CapKind, ...] = ("cost", "tokens")
        for kind in kinds:
            cap = self._caps.get(kind)
            if cap is not None and self.used(kind) >= cap:
                return "swarm_cap"
        if member is None or member not in self._members:
            return None
        for kind in kinds:
            share = self.share(member, kind)
            if share is not None and self.member_used(member, kind) >= share:
                return "share"
        return None

    def _member_ledger(
        self, name: str, outcome: MemberOutcome | None, unpriced: int
    ) -> MemberLedger:
        outcome = outcome or MemberOutcome(name=name, status=None)
        return MemberLedger(
            name=name,
            status=outcome.status,
            bridged=self._bridged[name],
            meter=self._members[name].model_copy(deep=True),
            calls=self._member_calls[name].model_copy(update={"unpriced": unpriced}),
            cancelled=outcome.cancelled,
            background_started=outcome.background_started,
            background_cancelled=outcome.background_cancelled,
        )

    def _delta_by_model(self) -> dict[str, ModelUsage]:
        now = dict(sample_model_usage())
        start = self._start_usage if self._start_usage is not None else now
        return {
            model: _minus(usage, start[model]) if model in start else usage
            for model, usage in now.items()
        }

    def _sample_delta(self) -> ModelUsage:
        total = ModelUsage()
        for usage in self._delta_by_model().values():
            total = total + usage
        return total

    def _overshoot(self, elapsed: float) -> dict[str, float]:
        used = {"cost": self._swarm.cost, "tokens": self.used("tokens"), "time": elapsed}
        return {
            kind: used[kind] - cap
            for kind, cap in self._caps.as_dict().items()
            if cap is not None and used[kind] > cap
        }


_LIMIT_KINDS = ("token", "cost", "message", "turn", "working", "time")


def write_ledger(ledger: SwarmLedger) -> None:
    """Write the ledger to the sample store and log it as an `inspect_swarm` InfoEvent."""
    data = ledger.model_dump(mode="json")
    store().set(LEDGER_KEY, data)
    transcript().info({"type": "ledger", "ledger": data}, source="inspect_swarm")


def _record(meter: Meter, usage: ModelUsage, cost: float | None, suspended: bool) -> None:
    if cost is not None:
        meter.cost += cost
        if suspended:
            meter.suspended_cost += cost
    if not suspended:
        meter.usage = meter.usage + usage


def _count(calls: Calls, event: ModelEvent, usage: ModelUsage | None) -> None:
    calls.errored += event.retries or 0
    if event.error is not None:
        calls.errored += 1
    elif event.cache == "read":
        calls.cache_replays += 1
    else:
        calls.calls += 1
        if usage is None:
            calls.no_usage += 1


def _price(model: str, usage: ModelUsage) -> float | None:
    info = get_model_info(model)
    return compute_model_cost(info.cost, usage) if info and info.cost else None


def _check_cost_data(models: Iterable[str | Model]) -> None:
    missing = sorted({str(model) for model in models if not _has_cost(model)})
    if missing:
        raise ValueError(
            f"Budget: the swarm has a cost cap, and these members' models have no cost data: "
            f"{', '.join(missing)}. A cost cap needs a price for every member's model: configure "
            "prices with set_model_cost() or --model-cost-config (set_model_info() for a model "
            "not in inspect's model database), or set no cost cap."
        )


def _has_cost(model: str | Model) -> bool:
    info = _get_model_info_direct(model) if isinstance(model, Model) else get_model_info(model)
    return info is not None and info.cost is not None


def _native_compaction_classes(models: Iterable[str | Model]) -> set[str]:
    roles = [m for value in model_roles().values() for m in _as_list(value)]
    loaded = [*_models.values(), active_model(), *roles, *models]
    return {
        type(model.api).__name__
        for model in loaded
        if isinstance(model, Model) and type(model.api).compact is not ModelAPI.compact
    }


def _as_list(value: Model | list[Model]) -> list[Model]:
    return value if isinstance(value, list) else [value]


def _minus(a: ModelUsage, b: ModelUsage) -> ModelUsage:
    def optional(x: int | None, y: int | None) -> int | None:
        return None if x is None else x - (y or 0)

    return ModelUsage(
        input_tokens=a.input_tokens - b.input_tokens,
        output_tokens=a.output_tokens - b.output_tokens,
        total_tokens=a.total_tokens - b.total_tokens,
        input_tokens_cache_write=optional(a.input_tokens_cache_write, b.input_tokens_cache_write),
        input_tokens_cache_read=optional(a.input_tokens_cache_read, b.input_tokens_cache_read),
        reasoning_tokens=optional(a.reasoning_tokens, b.reasoning_tokens),
        total_cost=None if a.total_cost is None else a.total_cost - (b.total_cost or 0.0),
    )


def _unattributed(delta: ModelUsage, swarm: Meter) -> ModelUsage:
    # never negative: whatever the swarm meter holds, the sample recorded too
    def tokens(x: int | None, y: int | None) -> int | None:
        return None if x is None else max(0, x - (y or 0))

    recorded = swarm.usage
    return ModelUsage(
        input_tokens=max(0, delta.input_tokens - recorded.input_tokens),
        output_tokens=max(0, delta.output_tokens - recorded.output_tokens),
        total_tokens=max(0, delta.total_tokens - recorded.total_tokens),
        input_tokens_cache_write=tokens(
            delta.input_tokens_cache_write, recorded.input_tokens_cache_write
        ),
        input_tokens_cache_read=tokens(
            delta.input_tokens_cache_read, recorded.input_tokens_cache_read
        ),
        reasoning_tokens=tokens(delta.reasoning_tokens, recorded.reasoning_tokens),
        total_cost=_clean_cost((delta.total_cost or 0.0) - swarm.cost),
    )


def _clean_cost(cost: float) -> float:
    return 0.0 if cost < _COST_EPSILON else cost


def _is_zero(usage: ModelUsage) -> bool:
    optional = (usage.input_tokens_cache_write, usage.input_tokens_cache_read)
    return (
        usage.input_tokens == usage.output_tokens == usage.total_tokens == 0
        and not any(optional)
        and not usage.reasoning_tokens
        and (usage.total_cost or 0.0) == 0.0
    )
