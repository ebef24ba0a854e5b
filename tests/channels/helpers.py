"""A stand-in for the swarm runtime, so the bus and the board can be driven directly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
from inspect_ai.log._transcript import Transcript, init_transcript, transcript
from inspect_ai.tool import Tool
from inspect_ai.util._span import _current_agent_span_id, _current_span_id

from inspect_swarm._context import _member, _swarm
from inspect_swarm._contracts._channel import Channel
from inspect_swarm._contracts._roster import Delivery, MemberInfo, MemberState
from inspect_swarm._runtime._bus._bus import SwarmBus
from inspect_swarm._runtime._member_run import MemberComm


class FakeHost:
    """The parts of a swarm run that the bus reads, set by the test."""

    def __init__(
        self,
        names: Sequence[str],
        channels: Sequence[Channel],
        *,
        delivery: dict[str, Delivery] | None = None,
        roles: dict[str, str] | None = None,
    ) -> None:
        init_transcript(Transcript())
        self._roster = [MemberInfo(n, (roles or {}).get(n)) for n in names]
        self.now = 0.0
        self.states: dict[str, MemberState] = dict.fromkeys(names, "running")
        self.statuses: dict[str, str | None] = dict.fromkeys(names)
        self.returned: set[str] = set()
        self.background: Counter[str] = Counter()
        self.deliveries: dict[str, Delivery] = delivery or {}
        self.is_stopping = False
        self._swarm_token = _swarm.set(self)  # type: ignore[arg-type]
        self.comms = {n: MemberComm() for n in names}
        self.bus_: SwarmBus = SwarmBus(self, channels, self.comms)  # type: ignore[arg-type]

    @property
    def roster(self) -> Sequence[MemberInfo]:
        return self._roster

    @property
    def stopping(self) -> bool:
        return self.is_stopping

    @property
    def bus(self) -> SwarmBus:
        return self.bus_

    @property
    def meter(self) -> Any:
        raise NotImplementedError

    def clock(self) -> float:
        return self.now

    def member_state(self, name: str) -> MemberState:
        return self.states[name]

    def member_status(self, name: str) -> str | None:
        return self.statuses[name]

    def agent_returned(self, name: str) -> bool:
        return name in self.returned

    def delivery(self, name: str) -> Delivery:
        return self.deliveries.get(name, "notify")

    def background_running(self, name: str) -> int:
        return self.background[name]

    def member_span_id(self, name: str) -> str | None:
        return f"loop-{name}"

    async def between_quanta(self, state: Any, decision: Any, *, conversational: bool) -> Any:
        return decision  # no activation policy

    def record_exposure(self, messages: Any) -> list[str]:
        member = _member.get()
        return [] if member is None else self.bus_.record_exposure(member, messages)

    def end(self, name: str, status: str = "submitted") -> None:
        self.states[name] = "ended"
        self.statuses[name] = status
        self.bus.agent_returned(name)
        self.bus.member_ended(name)

    def stop(self) -> None:
        self.is_stopping = True
        self.bus.begin_stop()


@contextmanager
def acting(member: str, loop: str | None = None, tool_span: str = "tool-span") -> Iterator[None]:
    """Run the block as `member`, in its own loop or in the nested loop `loop`."""
    tokens = (
        _member.set(member),
        _current_agent_span_id.set(loop or f"loop-{member}"),
        _current_span_id.set(tool_span),
    )
    try:
        yield
    finally:
        _current_span_id.reset(tokens[2])
        _current_agent_span_id.reset(tokens[1])
        _member.reset(tokens[0])


def tool_named(tools: list[Tool], name: str) -> Tool:
    from inspect_ai._util.registry import registry_info

    for t in tools:
        if registry_info(t).name == name:
            return t
    raise AssertionError(f"no tool {name} in {[registry_info(t).name for t in tools]}")


async def call(host: FakeHost, member: str, loop: str | None = None, **args: Any) -> str:
    """Call the shared_memory tool as a member's loop; a ToolError comes back as its text."""
    return await use(host, "shared_memory", member, loop, **args)


async def use(host: FakeHost, tool: str, member: str, loop: str | None = None, **args: Any) -> str:
    """Call a channel's tool as a member's loop; a ToolError comes back as its text."""
    from inspect_ai.tool import ToolError

    with acting(member):
        host.bus.channel_tools(member)  # the member's own loop resolves its tools first
    with acting(member, loop):
        found = tool_named(host.bus.channel_tools(member), tool)
        try:
            return str(await found(**args))
        except ToolError as error:
            return f"ERROR: {error.message}"


def comm_events(kind: str | None = None) -> list[dict[str, Any]]:
    events = [
        e.data
        for e in transcript().events
        if e.event == "info" and e.source == "inspect_swarm" and isinstance(e.data, dict)
    ]
    return [e for e in events if e.get("type") == "comm" and (kind is None or e["kind"] == kind)]


async def waiting(h: FakeHost, count: int) -> None:
    """Let the waits start: until `count` of them are pending."""
    with anyio.fail_after(5):
        while len(h.bus_._pending) < count:  # noqa: ASYNC110
            await anyio.sleep(0.001)


async def woken(h: FakeHost, member: str, act: Callable[[], Awaitable[object]]) -> str:
    """What ended a `swarm_wait` of the member's own loop, begun before `act` ran."""
    woke: list[str] = []

    async def wait() -> None:
        woke.append(await use(h, "swarm_wait", member, timeout=5))

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await waiting(h, 1)
        await act()
    return woke[0]
