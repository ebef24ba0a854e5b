"""A sandbox's port reached from the server through the agent of the sandbox's node.

The server asks the agent to open a port (`PortRelays.open`): the agent dials the port inside
the sandbox's own network namespace (so only that sandbox's loopback is reachable, never the
node's ports nor another sandbox's), and listens on the node's address for one connection,
answering with that address and a token made for it. The server then has the agent relay
(`PortRelays.relay`), connects, and sends the token first: the one connection accepted is
relayed to the sandbox's port byte for byte if its first bytes are the token, else closed.
Either way the listener closes after that one connection (or after `_ACCEPT_SECONDS` with
none), so a token is good once.
"""

from __future__ import annotations

import errno
import hmac
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import ByteReceiveStream, ByteStream, SocketListener, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

_TOKEN_BYTES = 32
_ACCEPT_SECONDS = 30.0
"""How long an opened port waits for the server's connection and its token."""
_MOST = 128
"""The most connections to a sandbox's ports opened or relayed through its node at once."""
_CHUNK = 64 * 1024


@dataclass
class _Opened:
    """A port dialed for the server, until its connection comes."""

    listener: SocketListener
    upstream: SocketStream
    """The connection to the sandbox's port."""
    deadline: float
    """When it stops waiting (the server that opened it may never come)."""

    async def aclose(self) -> None:
        await self.listener.aclose()
        await self.upstream.aclose()


class PortRelays:
    """The connections to one sandbox's ports relayed for the server through its node."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._opened: dict[bytes, _Opened] = {}
        self._relaying: set[anyio.CancelScope] = set()

    async def open(
        self, dial: Callable[[int], socket.socket], port: int
    ) -> tuple[tuple[str, int], bytes]:
        """Dial `port` of the sandbox with `dial` (its errors raised: ConnectionRefusedError
        when nothing listens); where the server connects for it, and the token it sends."""
        await self._drop_stale()
        if len(self._opened) + len(self._relaying) >= _MOST:
            raise OSError(
                errno.EAGAIN,
                f"{_MOST} connections to the sandbox's ports are open through its node: "
                "close some first",
            )
        upstream = await SocketStream.from_socket(await anyio.to_thread.run_sync(dial, port))
        family = socket.AF_INET6 if ":" in self._address else socket.AF_INET
        try:
            listening = socket.create_server((self._address, 0), family=family, backlog=1)
            listener = await SocketListener.from_socket(listening)
        except BaseException:
            await upstream.aclose()
            raise
        token = secrets.token_bytes(_TOKEN_BYTES)
        self._opened[token] = _Opened(listener, upstream, anyio.current_time() + _ACCEPT_SECONDS)
        return listening.getsockname()[:2], token

    async def relay(self, token: bytes) -> None:
        """Accept the one connection of the port opened with `token`, and relay it to the
        sandbox's port until either side closes (LookupError when no port waits on it)."""
        opened = self._opened.pop(token, None)
        if opened is None:
            raise LookupError("no port of the sandbox waits on this token")
        with anyio.CancelScope() as scope:
            self._relaying.add(scope)
            try:
                async with opened.upstream, opened.listener:
                    with anyio.fail_after(_ACCEPT_SECONDS):
                        client = await opened.listener.accept()
                    await opened.listener.aclose()  # one connection only
                    async with client:
                        given = BufferedByteReceiveStream(client)
                        with anyio.fail_after(_ACCEPT_SECONDS):
                            first = await given.receive_exactly(_TOKEN_BYTES)
                        if hmac.compare_digest(first, token):
                            await _both_ways(given, client, opened.upstream)
            finally:
                self._relaying.discard(scope)

    async def aclose(self) -> None:
        """Close every port opened and every relay (the sandbox is ending)."""
        for scope in list(self._relaying):
            scope.cancel()
        opened, self._opened = list(self._opened.values()), {}
        for one in opened:
            await one.aclose()

    async def _drop_stale(self) -> None:
        """Close the ports opened for a relay that never came."""
        now = anyio.current_time()
        for token, opened in list(self._opened.items()):
            if opened.deadline < now:
                del self._opened[token]
                await opened.aclose()


async def _both_ways(received: ByteReceiveStream, client: ByteStream, upstream: ByteStream) -> None:
    """Pass bytes between the server's connection and the sandbox's port, each way ended as
    its sender ends it; both cut once either side breaks."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(_one_way, received, upstream, tg.cancel_scope)
        tg.start_soon(_one_way, upstream, client, tg.cancel_scope)


async def _one_way(source: ByteReceiveStream, sink: ByteStream, cut: anyio.CancelScope) -> None:
    try:
        while True:
            try:
                data = await source.receive(_CHUNK)
            except anyio.EndOfStream:
                await sink.send_eof()
                return
            await sink.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        cut.cancel()
