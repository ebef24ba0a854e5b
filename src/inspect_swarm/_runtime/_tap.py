"""The swarm's taps on the sample: the model hooks and the one transcript subscription.

Inspect's hooks are global, so they stay off while no swarm runs; when one does, each call's
hooks reach the run it belongs to through `current_swarm()`, in the calling task. The
transcript tap takes each completed event of the swarm once (Inspect delivers an event more
than once as it completes) and hands it, with the member it belongs to, to the meter, the
observer and the bus.
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from inspect_ai.event import Event, ModelEvent, ScoreEvent, ToolEvent
from inspect_ai.hooks import (
    BeforeModelGenerate,
    Hooks,
    ModelCacheUsageData,
    ModelUsageData,
    hooks,
)
from inspect_ai.log import transcript

from .._context import SwarmHost, current_member, current_swarm
from ._bus._bus import SwarmBus
from ._member_run import MemberRun
from ._meter import SwarmMeter
from ._observe import SwarmObserver

# swarms metering in this process: the hooks are global, so they stay off when none runs
_metering = 0


@hooks(name="swarm_meter", description="Meters the model calls of running swarms.")
class SwarmMeterHooks(Hooks):
    """Refuses the calls a running swarm no longer allows, and charges each completed call to
    the swarm it runs in, in the calling task."""

    def enabled(self) -> bool:
        return _metering > 0

    async def on_before_model_generate(self, data: BeforeModelGenerate) -> None:
        host = current_swarm()
        if host is not None:
            host.before_generate(current_member(), len(data.input))

    async def on_model_usage(self, data: ModelUsageData) -> None:
        host = current_swarm()
        if host is not None:
            host.charge(data.model_name, data.usage, cached=False)

    async def on_model_cache_usage(self, data: ModelCacheUsageData) -> None:
        host = current_swarm()
        if host is not None:
            host.charge(data.model_name, data.usage, cached=True)


_TAPPED = (ModelEvent, ToolEvent, ScoreEvent)


class TranscriptTap:
    """The one subscriber of a run to the sample's transcript."""

    def __init__(
        self,
        host: SwarmHost,
        members: Mapping[str, MemberRun],
        meter: SwarmMeter,
        observer: SwarmObserver | None = None,
        bus: SwarmBus | None = None,
    ) -> None:
        self._host = host
        self._members = members
        self._meter = meter
        self._observer = observer
        self._bus = bus
        self._seen: set[str] = set()

    def on_event(self, event: Event) -> None:
        # subscribers run in the emitting task, so the swarm and member are the caller's
        if not isinstance(event, _TAPPED) or event.pending or current_swarm() is not self._host:
            return
        if event.uuid is not None:
            if event.uuid in self._seen:
                return
            self._seen.add(event.uuid)
        name = current_member()
        m = self._members.get(name) if name is not None else None
        if isinstance(event, ModelEvent):
            self._meter.observe(event, m)
            if m is None:
                return
            if self._observer is not None:
                self._observer.model(m, event)
            if self._bus is not None and event.error is None:
                self._bus.model_call(m.name, event)
        elif m is None or self._observer is None:
            return
        elif isinstance(event, ToolEvent):
            self._observer.tool(m, event)
        else:
            self._observer.score(m, event)


@contextmanager
def tapped(tap: TranscriptTap) -> Iterator[None]:
    """Meter and observe the swarm while the block runs, in the sample: enable the hooks and
    subscribe the tap. Open the meter first."""
    global _metering
    unsubscribe = transcript()._subscribe(tap.on_event)
    _metering += 1
    try:
        yield
    finally:
        _metering -= 1
        unsubscribe()
