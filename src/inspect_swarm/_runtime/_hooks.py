from collections.abc import Iterator
from contextlib import contextmanager

from inspect_ai.event import Event, ModelEvent
from inspect_ai.hooks import (
    BeforeModelGenerate,
    Hooks,
    ModelCacheUsageData,
    ModelUsageData,
    hooks,
)
from inspect_ai.log import transcript
from inspect_ai.model import ModelUsage

from .._context import SwarmHost, current_member, current_swarm

# swarms metering in this process: the hooks are global, so they stay off when none runs
_metering = 0


@hooks(name="swarm_meter", description="Meters the model calls of running swarms.")
class SwarmMeterHooks(Hooks):
    """Charges each completed call to the swarm it runs in, in the calling task."""

    def enabled(self) -> bool:
        return _metering > 0

    async def on_before_model_generate(self, data: BeforeModelGenerate) -> None:
        host = current_swarm()
        if host is not None:
            host.before_generate(current_member(), len(data.input))

    async def on_model_usage(self, data: ModelUsageData) -> None:
        _charge(data.model_name, data.usage, cached=False)

    async def on_model_cache_usage(self, data: ModelCacheUsageData) -> None:
        _charge(data.model_name, data.usage, cached=True)


def _charge(model: str, usage: ModelUsage, *, cached: bool) -> None:
    host = current_swarm()
    if host is None:
        return
    verdict = host.meter.charge(model, usage, cached=cached)
    host.on_charge_verdict(current_member(), verdict)


@contextmanager
def metering(host: SwarmHost) -> Iterator[None]:
    """Meter the swarm while the block runs, in the sample: enable the hooks and count the model
    events the swarm's tasks emit. Open the meter (`host.meter.open()`) first."""
    global _metering

    def observe(event: Event) -> None:
        # subscribers run in the emitting task, so the swarm and member are the caller's
        if isinstance(event, ModelEvent) and current_swarm() is host:
            host.meter.observe(event)

    unsubscribe = transcript()._subscribe(observe)
    _metering += 1
    try:
        yield
    finally:
        _metering -= 1
        unsubscribe()
