"""The swarm's meter: what each call of the swarm used and cost, and the ledger of the run."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from inspect_ai.event import ModelEvent
from inspect_ai.model import Model, ModelAPI, ModelUsage, compute_model_cost, get_model_info
from inspect_ai.model._model import _models, active_model, model_roles, sample_model_usage
from inspect_ai.model._model_info import _get_model_info_direct
from inspect_ai.util import sample_limits
from inspect_ai.util._limit import token_limit_tree

from .._context import current_phase
from .._contracts._budget import Budget, Caps
from .._contracts._schema import Calls, MemberLedger, Meter, SwarmLedger
from .._contracts._status import EndedBy, SwarmStopReason
from ._member_run import MemberRun


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
    """The swarm's own meter: records what each completed call used and cost, in the meter of
    the member that made it (its `MemberRun`) or of the phase outside every member, counts the
    model events of the swarm, and makes the ledger when the swarm ends.

    It counts; the budget's enforcement (`BudgetEnforcer`) decides what a count means.
    """

    def __init__(self, members: Sequence[MemberRun], models: Sequence[str | Model]) -> None:
        self._members = list(members)
        self._models = list(models)
        self._start_usage: dict[str, ModelUsage] | None = None
        self._sample_limits: dict[str, float | None] = dict.fromkeys(_LIMIT_KINDS)
        self._compaction: set[str] = set()
        self._phases: dict[str, Meter] = {"runtime": Meter(), "final": Meter()}
        self._swarm = Meter()
        self._unpriced_recorded = 0
        self._calls = Calls()
        # usage objects of completed calls not priced yet when observed: inspect sets the cost on
        # the same object after notifying subscribers, so they are counted when the ledger is made
        self._cost_pending: list[tuple[MemberRun | None, ModelUsage]] = []
        # completed calls by the id of their usage object, which the usage hook is given, until
        # the hook charges them: inspect raises a token or cost limit error before the hook, so
        # the call that reaches a limit is charged only when the ledger is made
        self._uncharged: dict[int, _Uncharged] = {}

    @property
    def swarm(self) -> Meter:
        """Every call in the swarm's context."""
        return self._swarm

    def open(self) -> None:
        """Start metering, in the sample, when the swarm starts."""
        self._start_usage = dict(sample_model_usage())
        limits = sample_limits()
        self._sample_limits = {kind: getattr(limits, kind).limit for kind in _LIMIT_KINDS}
        self._compaction = _native_compaction_classes(self._models)

    def check_cost_data(self) -> None:
        """Refuse a cost cap when a member's model has no cost data.

        Raises:
            ValueError: A member's model has no cost data.
        """
        _check_cost_data(self._models)

    def charge(self, model: str, usage: ModelUsage, member: MemberRun | None) -> None:
        """Record a completed call of `member` (None outside every member), in the calling
        task."""
        self._uncharged.pop(id(usage), None)
        self._record_call(model, usage, self._meter_of(member), token_limit_tree.is_suspended())

    def observe(self, event: ModelEvent, member: MemberRun | None) -> None:
        """Count a completed model event of `member` (None outside every member), in the
        emitting task."""
        usage = event.output.usage
        _count(self._calls, event, usage)
        if member is not None:
            _count(member.calls, event, usage)
        if event.error is None and event.cache != "read" and usage:
            if usage.total_cost is None:
                self._cost_pending.append((member, usage))
            self._uncharged[id(usage)] = _Uncharged(
                event.model, usage, self._meter_of(member), token_limit_tree.is_suspended()
            )

    def ledger(
        self,
        *,
        budget: Budget,
        caps: Caps,
        overshoot: dict[str, float],
        stop_reason: SwarmStopReason | None,
        ended_by: EndedBy | None,
        interrupted: bool,
        final_cancelled: bool,
        resumed: bool,
    ) -> SwarmLedger:
        """The ledger of the swarm's run, its members' entries projected from their
        `MemberRun`s. Synchronous, so it can be made on every path. Settle the meter first."""
        unpriced = [member for member, usage in self._cost_pending if usage.total_cost is None]
        calls = self._calls.model_copy(update={"unpriced": len(unpriced)})
        entries = [_member_ledger(m, unpriced.count(m)) for m in self._members]
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
            or any(m.cancelled or m.background.cancelled for m in self._members)
            or calls.errored
            or calls.no_usage
            or calls.unpriced
            or self._unpriced_recorded
            or unpriced_models
            or compaction
        )
        return SwarmLedger(
            budget=budget,
            caps=caps.as_dict(),
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
            overshoot=overshoot,
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

    def settle(self) -> None:
        """Charge the completed calls the usage hook never charged, such as each call that
        reached a token or cost limit."""
        for call in self._uncharged.values():
            self._record_call(call.model, call.usage, call.meter, call.suspended)
        self._uncharged.clear()

    def _meter_of(self, member: MemberRun | None) -> Meter | None:
        if member is not None:
            return member.meter
        phase = current_phase()
        return self._phases[phase] if phase is not None else None

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


def _member_ledger(m: MemberRun, unpriced: int) -> MemberLedger:
    return MemberLedger(
        name=m.name,
        status=m.status,
        bridged=m.spec.bridged,
        meter=m.meter.model_copy(deep=True),
        calls=m.calls.model_copy(update={"unpriced": unpriced}),
        cancelled=m.cancelled,
        background_started=m.background.started,
        background_cancelled=m.background.cancelled,
    )


_LIMIT_KINDS = ("token", "cost", "message", "turn", "working", "time")


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
