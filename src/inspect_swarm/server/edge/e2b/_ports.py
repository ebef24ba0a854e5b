"""Forward requests to the ports of sandboxes, routed by `Host`.

The SDK's `get_host(port)` names `<port>-<sandbox id>.<domain>`; a request to the server
whose `Host` starts with such a label (whatever the domain) goes to that port on the
sandbox's own loopback, and its answer comes back as the sandbox's server gave it. Ports are
open to anyone who reaches the server, as E2B's are, unless the sandbox was made with
`allowPublicTraffic` false: then only requests carrying its traffic token get through.
"""

from __future__ import annotations

import hmac
import json
import re
import select
from collections import OrderedDict

import anyio
import anyio.to_thread
import h11
from anyio.abc import SocketAttribute, SocketStream
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...domain._long_lived import LongLivedSandbox
from ...domain._server import SwarmServer
from ...model._types import NotFound
from ...sandboxes._isolation import SandboxError
from ._port_sockets import relay_socket
from ._wire import E2BError

TRAFFIC_HEADER = "e2b-traffic-access-token"
"""Where a request to a port carries the sandbox's traffic token (the SDK's name)."""

_HOST = re.compile(r"([0-9]{1,5})-([A-Za-z0-9_-]{1,128})\.")
_HOP_BY_HOP = frozenset(
    name.encode()
    for name in (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        TRAFFIC_HEADER,
    )
)
"""Headers of one hop, not passed on (nor the traffic token, which is the server's)."""
_CHUNKED = [(b"transfer-encoding", b"chunked")]


def names_a_port(host: str) -> bool:
    """Whether a `Host` header names a sandbox's port (`<port>-<sandbox id>.<domain>`)."""
    return _HOST.match(host) is not None


class PortRouter:
    """ASGI middleware: requests whose `Host` names a sandbox's port go to that port."""

    def __init__(self, app: ASGIApp, server: SwarmServer) -> None:
        self._app = app
        self._server = server
        self._idle = _Idle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = Headers(scope=scope)
            if (found := _HOST.match(headers.get("host", ""))) is not None:
                await self._forward(scope, receive, send, int(found[1]), found[2])
                return
        await self._app(scope, receive, send)

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, port: int, sandbox_id: str
    ) -> None:
        try:
            stream = await self._open(Headers(scope=scope), port, sandbox_id)
        except E2BError as ex:
            await _refuse(scope, receive, send, ex)
            return
        if scope["type"] == "websocket":
            async with stream:
                await relay_socket(stream, scope, receive, send)
            return
        try:
            reusable = await _relay(stream, scope, receive, send)
        except _Broken as ex:
            await stream.aclose()
            await _refuse(
                scope, receive, send, E2BError(502, f"port {port} of sandbox {sandbox_id}: {ex}")
            )
            return
        except BaseException:
            await stream.aclose()
            raise
        if reusable:
            self._idle.put((sandbox_id, port), stream)
        else:
            await stream.aclose()

    async def _open(self, headers: Headers, port: int, sandbox_id: str) -> SocketStream:
        box = self._sandbox(sandbox_id)
        token = box.traffic_token
        if token is not None and not hmac.compare_digest(
            headers.get(TRAFFIC_HEADER, "").encode(), token.encode()
        ):
            raise E2BError(
                403,
                f"sandbox {sandbox_id} takes requests to its ports only with its traffic "
                f"token: send the sandbox's traffic_access_token as {TRAFFIC_HEADER}",
            )
        if not 1 <= port <= 65535:
            raise E2BError(400, f"port: {port} is not a TCP port; name one of 1 to 65535")
        if box.paused_at is not None:
            # its frozen processes would take the connection and never answer
            raise E2BError(
                502,
                f"sandbox {sandbox_id} is paused: connect to it (or resume it) to reach its "
                f"port {port}",
            )
        if (idle := self._idle.take((sandbox_id, port))) is not None:
            return idle
        try:
            sock = await anyio.to_thread.run_sync(box.sandbox.dial, port)
        except ConnectionRefusedError:
            raise E2BError(
                502,
                f"nothing listens on port {port} in sandbox {sandbox_id}: start a server "
                "there first",
            ) from None
        except (SandboxError, OSError) as ex:
            raise E2BError(
                502, f"port {port} of sandbox {sandbox_id} is not reachable: {ex}"
            ) from None
        return await SocketStream.from_socket(sock)

    def _sandbox(self, sandbox_id: str) -> LongLivedSandbox:
        try:
            return self._server.live_sandbox(sandbox_id)
        except NotFound:
            # what E2B's proxy answers for a sandbox that was killed or timed out
            raise E2BError(502, f"The sandbox was not found: {sandbox_id}") from None


class _Idle:
    """Connections to sandboxes' ports whose last exchange ended cleanly, kept for the next
    request to the same port (a new connection per request would cost a thread hop and a
    handshake each). At most MAX_IDLE in all: the oldest goes first."""

    MAX_IDLE = 64

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[tuple[str, int], int], SocketStream] = OrderedDict()

    def put(self, key: tuple[str, int], stream: SocketStream) -> None:
        self._kept[key, id(stream)] = stream
        while len(self._kept) > self.MAX_IDLE:
            _, oldest = self._kept.popitem(last=False)
            _close_now(oldest)

    def take(self, key: tuple[str, int]) -> SocketStream | None:
        """An idle connection to `key` that its other end has not closed, if there is one."""
        for kept in [k for k in reversed(self._kept) if k[0] == key]:
            stream = self._kept.pop(kept)
            if _open_still(stream):
                return stream
            _close_now(stream)
        return None


def _open_still(stream: SocketStream) -> bool:
    """Whether the other end has neither closed the connection nor sent anything unasked
    (either makes it readable)."""
    readable, _, _ = select.select([stream.extra(SocketAttribute.raw_socket).fileno()], [], [], 0)
    return not readable


def _close_now(stream: SocketStream) -> None:
    stream.extra(SocketAttribute.raw_socket).close()


async def _refuse(scope: Scope, receive: Receive, send: Send, error: E2BError) -> None:
    """Answer with `error`; a WebSocket's handshake is answered in HTTP too, with it."""
    if scope["type"] == "http":
        await JSONResponse(error.body(), status_code=error.status)(scope, receive, send)
        return
    head = [(b"content-type", b"application/json")]
    await send({"type": "websocket.http.response.start", "status": error.status, "headers": head})
    body = json.dumps(error.body()).encode()
    await send({"type": "websocket.http.response.body", "body": body})


class _Broken(Exception):
    """The sandbox's server closed the connection or broke HTTP before its answer began."""


async def _relay(stream: SocketStream, scope: Scope, receive: Receive, send: Send) -> bool:
    """Pass the request on over `stream` and its answer back: whether the connection may
    carry another request. _Broken when no answer began."""
    upstream = h11.Connection(h11.CLIENT)
    if not await _send_request(upstream, stream, scope, receive):
        return False  # the client went away
    started = False
    while True:
        try:
            event = upstream.next_event()
            if event is h11.NEED_DATA:
                upstream.receive_data(await _received(stream))
                continue
        except h11.ProtocolError as ex:
            if started:
                raise  # an answer cut short: only closing the connection tells the client
            raise _Broken(f"its server broke HTTP ({ex})") from None
        if isinstance(event, h11.Response):
            headers = [(k, v) for k, v in event.headers if k not in _HOP_BY_HOP]
            await send(
                {"type": "http.response.start", "status": event.status_code, "headers": headers}
            )
            started = True
        elif isinstance(event, h11.Data):
            await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            if not started:
                raise _Broken("its server closed the connection without answering")
            await send({"type": "http.response.body", "body": b""})
            return upstream.our_state is upstream.their_state is h11.DONE


async def _send_request(
    upstream: h11.Connection, stream: SocketStream, scope: Scope, receive: Receive
) -> bool:
    """Send the request's head and body as they come; False if the client went away."""
    headers = [(k, v) for k, v in scope["headers"] if k not in _HOP_BY_HOP]
    if any(k == b"transfer-encoding" for k, _ in scope["headers"]):
        headers += _CHUNKED  # the body's length is not known: pass it on in chunks
    target = scope.get("raw_path") or scope["path"].encode()
    if scope["query_string"]:
        target += b"?" + scope["query_string"]
    request = h11.Request(method=scope["method"], target=target, headers=headers)
    await stream.send(upstream.send(request) or b"")
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return False
        if body := message.get("body", b""):
            await stream.send(upstream.send(h11.Data(data=body)) or b"")
        if not message.get("more_body", False):
            await stream.send(upstream.send(h11.EndOfMessage()) or b"")
            return True


async def _received(stream: SocketStream) -> bytes:
    """The next bytes from the sandbox's server; empty at the end of the connection."""
    try:
        return await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return b""
