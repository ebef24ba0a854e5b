"""Relay a WebSocket between a client and a server in a sandbox: the server's side of the
relay is the ASGI connection, the sandbox's side a WebSocket client (websockets' sans-I/O
protocol) over a connection to the sandbox's port."""

from __future__ import annotations

import anyio
from anyio.abc import SocketStream
from starlette.types import Message, Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

_NOT_PASSED = frozenset({"host", "connection", "upgrade", "e2b-traffic-access-token"}) | {
    "sec-websocket-" + name for name in ("key", "version", "extensions", "protocol")
}
"""Headers the relay makes itself for the sandbox's side, or keeps (the traffic token)."""
_MOST = 16 * 1024 * 1024
"""The largest message relayed, in bytes."""


async def relay_socket(stream: SocketStream, scope: Scope, receive: Receive, send: Send) -> None:
    """Open the WebSocket to the sandbox's server over `stream`, accept the client's if it
    agreed, and pass messages both ways until either side closes."""
    protocol = await _handshake(stream, scope)
    if protocol is None:
        await send({"type": "websocket.close", "code": 1011})
        return
    response = protocol.handshake_response
    chosen = response.headers.get("Sec-WebSocket-Protocol") if response else None
    await send({"type": "websocket.accept", "subprotocol": chosen})
    async with anyio.create_task_group() as tg:
        tg.start_soon(_outward, protocol, stream, send, tg.cancel_scope)
        await _inward(protocol, stream, receive)
        tg.cancel_scope.cancel()


class _Client(ClientProtocol):
    handshake_response: Response | None = None


async def _handshake(stream: SocketStream, scope: Scope) -> _Client | None:
    """The sandbox's side once its server accepted the WebSocket; None if it refused."""
    host = dict(scope["headers"]).get(b"host", b"").decode()
    path = scope.get("raw_path") or scope["path"].encode()
    query = b"?" + scope["query_string"] if scope["query_string"] else b""
    uri = parse_uri(f"ws://{host}{(path + query).decode()}")
    subprotocols = [Subprotocol(s) for s in scope.get("subprotocols", [])]
    protocol = _Client(uri, subprotocols=subprotocols or None, max_size=_MOST)
    request = protocol.connect()
    for name, value in scope["headers"]:
        if name.decode() not in _NOT_PASSED:
            request.headers[name.decode()] = value.decode("latin-1")
    protocol.send_request(request)
    await _flush(protocol, stream)
    while protocol.state is State.CONNECTING:
        try:
            protocol.receive_data(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    for event in protocol.events_received():
        if isinstance(event, Response):
            protocol.handshake_response = event
    return protocol if protocol.state is State.OPEN else None


async def _flush(protocol: ClientProtocol, stream: SocketStream) -> None:
    if data := b"".join(protocol.data_to_send()):
        await stream.send(data)


async def _inward(protocol: ClientProtocol, stream: SocketStream, receive: Receive) -> None:
    """Client to sandbox, until the client goes."""
    while True:
        message: Message = await receive()
        if message["type"] == "websocket.disconnect":
            if protocol.state is State.OPEN:
                protocol.send_close(message.get("code") or 1000)
                await _flush(protocol, stream)
            return
        if message.get("text") is not None:
            protocol.send_text(message["text"].encode())
        elif message.get("bytes") is not None:
            protocol.send_binary(message["bytes"])
        await _flush(protocol, stream)


async def _outward(
    protocol: ClientProtocol, stream: SocketStream, send: Send, done: anyio.CancelScope
) -> None:
    """Sandbox to client, until the sandbox's server closes."""
    fragments = _Fragments()
    while protocol.close_rcvd is None:
        try:
            protocol.receive_data(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            protocol.receive_eof()
            if protocol.close_rcvd is None:
                break
        for frame in protocol.events_received():
            if isinstance(frame, Frame) and (message := fragments.add(frame)) is not None:
                await send(message)
        await _flush(protocol, stream)  # pongs, and the answer to a close
    code = protocol.close_rcvd.code if protocol.close_rcvd is not None else 1006
    await send({"type": "websocket.close", "code": 1000 if code in (1005, 1006) else code})
    done.cancel()


class _Fragments:
    """The frames of the message being received, until its last (sent on whole)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.text = False

    def add(self, frame: Frame) -> Message | None:
        """The whole message once `frame` ends it."""
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            self.parts, self.text = [], frame.opcode is Opcode.TEXT
        elif frame.opcode is not Opcode.CONT:
            return None  # control frames: the protocol answers them
        self.parts.append(bytes(frame.data))
        if not frame.fin:
            return None
        data = b"".join(self.parts)
        if self.text:
            return {"type": "websocket.send", "text": data.decode()}
        return {"type": "websocket.send", "bytes": data}
