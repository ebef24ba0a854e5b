"""The server's connections: uvicorn's h11 protocol with the limits that apply before a
request reaches the application.

A connection from an address that holds `max_client_connections` already is reset as soon as
it is accepted, before anything is made for it; it stays counted until it closes, a WebSocket
too. Its first request head goes through the application's gate (`_gate`), which refuses a
request that brings no credential from its raw bytes, never parsing it or running the
application. Each request's head must come within the read timeout (uvicorn times out idle
keep-alive connections, but not one that sends a partial head, or nothing, and holds it
forever): one sweep a second closes the connections past it, rather than a timer each.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from importlib.util import find_spec
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from ._gate import Gate
from ._middleware import MAX_HEAD, HttpLimits

Peer = tuple[str, int]
"""A client's address and port."""

_HEAD_END = re.compile(rb"\n\r?\n")
"""Where h11 sees a request head end."""


class ClientTally:
    """The open connections of each client address, each counted until it closes."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._open: Counter[str] = Counter()
        self._held: dict[asyncio.BaseTransport, str] = {}

    def take(self, transport: asyncio.BaseTransport, address: str) -> bool:
        """Count a new connection from `address`, unless it holds the cap already."""
        if self._open[address] >= self._cap:
            return False
        self._open[address] += 1
        self._held[transport] = address
        return True

    def release(self, transport: asyncio.BaseTransport) -> None:
        """Count a closed connection out (once, whichever protocol it ended in)."""
        address = self._held.pop(transport, None)
        if address is not None:
            self._open[address] -= 1
            if not self._open[address]:
                del self._open[address]


class _Deadlines:
    """When each connection's next request head is due; one sweep closes those past it.

    Every connection waits the same time, so the connections are in the order they are due:
    a sweep stops at the first that is not."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._every = min(1.0, timeout / 2)
        self._due: OrderedDict[asyncio.Transport, float] = OrderedDict()
        self._sweep: asyncio.TimerHandle | None = None

    def wait(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._due[transport] = loop.time() + self._timeout
        self._due.move_to_end(transport)
        if self._sweep is None:
            self._sweep = loop.call_later(self._every, self._close_late, loop)

    def stop(self, transport: asyncio.Transport) -> None:
        self._due.pop(transport, None)

    def _close_late(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        while self._due and next(iter(self._due.values())) <= now:
            transport, _ = self._due.popitem(last=False)
            if not transport.is_closing():
                transport.close()
        self._sweep = loop.call_later(self._every, self._close_late, loop) if self._due else None


def http_protocol(
    limits: HttpLimits,
    tally: ClientTally,
    gates: Mapping[int, Gate],
    exempt: Callable[[Peer], bool] = lambda _: False,
) -> type[H11Protocol]:
    """uvicorn's h11 protocol under `limits`, counting connections in `tally` (except
    those `exempt` names: a sandbox's, forwarded by this server, which caps them itself) and
    passing first heads through the gate of the port they came to (`gates`, by port)."""
    deadlines = _Deadlines(limits.read_timeout)

    class Protocol(H11Protocol):
        _waiting: RequestResponseCycle | None = None
        """The cycle that was current when the head was awaited: a new one is a new head."""
        _gate: Gate | None = None
        _first: bytearray | None = None
        """The connection's first bytes, until they hold a head for the gate."""
        _taken = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._made = (args, kwargs)  # made once the connection is taken

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            peer = transport.get_extra_info("peername")
            counted = isinstance(peer, tuple) and not exempt(peer[:2])
            if counted and not tally.take(transport, peer[0]):
                transport.abort()  # type: ignore[attr-defined]
                return
            args, kwargs = self._made
            super().__init__(*args, **kwargs)
            super().connection_made(transport)  # type: ignore[arg-type]
            self._taken = True
            port = self.server[1] if self.server is not None else None
            if port is not None and (gate := gates.get(port)) is not None:
                self._gate, self._first = gate, bytearray()
            self._await_head()

        def data_received(self, data: bytes) -> None:
            if self._first is not None:
                data = self._gated(self._first, data)
                if not data:
                    return
            super().data_received(data)
            if self.cycle is not self._waiting:
                deadlines.stop(self.transport)

        def _gated(self, first: bytearray, data: bytes) -> bytes:
            """What goes on to h11 of a first head, `first` so far and `data` new: nothing
            while it is incomplete (up to the largest head), nor when the gate answers it."""
            searched = max(0, len(first) - 2)  # a head's end may begin in what came before
            first += data
            end = _HEAD_END.search(first, searched)
            if end is None and len(first) <= MAX_HEAD:
                return b""
            self._first = None
            assert self._gate is not None
            refusal = self._gate.refusal(bytes(first[: end.end()])) if end is not None else None
            if refusal is None:
                return bytes(first)
            head, body = refusal
            dated = b"".join(b"%s: %s\r\n" % pair for pair in self.server_state.default_headers)
            self.transport.write(head + dated + b"\r\n" + body)
            self.transport.close()
            return b""

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # unless a pipelined request has begun, or the connection is ending
            if self.cycle.response_complete and not self.transport.is_closing():
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._taken:  # not reset as it was accepted
                tally.release(self.transport)
                deadlines.stop(self.transport)
                super().connection_lost(exc)

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            # the connection is the WebSocket protocol's from now on, which counts it out
            deadlines.stop(self.transport)
            super().handle_websocket_upgrade(event)

        def _await_head(self) -> None:
            self._waiting = self.cycle
            deadlines.wait(self.transport, self.loop)

    return Protocol


def websocket_protocol(tally: ClientTally) -> type[asyncio.Protocol] | None:
    """uvicorn's WebSocket protocol, counting its connection out of `tally` when it closes
    (the HTTP protocol it took the connection over from counted it in); None without the
    websockets package."""
    if find_spec("websockets") is None:
        return None
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class Protocol(WebSocketsSansIOProtocol):
        def connection_lost(self, exc: Exception | None) -> None:
            tally.release(self.transport)
            super().connection_lost(exc)

    return Protocol
