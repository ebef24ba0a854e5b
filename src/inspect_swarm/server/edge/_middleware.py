"""The server's HTTP edge: body limits, read deadlines, and errors answered on a live connection.

Two pieces. `Edge` is ASGI middleware around the app: it refuses a body over its limit with
413 as soon as its declared length or its bytes so far pass it (never buffering more), a
body that stalls with 408, and answers an unexpected error as a JSON 500 without passing it
on (Starlette's outermost middleware re-raises every error it answers, and uvicorn then
closes the connection, so one bad request would cost a client its keep-alive connection).
`http_protocol` is uvicorn's h11 protocol with a deadline for each request's head: uvicorn
times out idle keep-alive connections but not a connection that sends a partial head, or
nothing, and holds it forever.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from .._defaults import SERVER_DEFAULTS
from ..records._wire import error_object

MIB = 1024**2

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpLimits:
    """What one request may send, and how slowly."""

    max_body: int = SERVER_DEFAULTS.max_body_mib * MIB
    """The largest request body, except uploads."""
    max_file: int = SERVER_DEFAULTS.max_file_mib * MIB
    """The largest upload (the bodies of the paths `Edge` is given as uploads: a file, a
    command's input) and the largest file read back, through the E2B daemon."""
    read_timeout: float = SERVER_DEFAULTS.read_timeout
    """How long a request's head may take to arrive, and its body may pause, in seconds."""


class _Refused(Exception):
    """The request was refused while its body was read (the answer is the edge's)."""


class Edge:
    """ASGI middleware that enforces `HttpLimits` and answers unexpected errors as JSON."""

    def __init__(self, app: ASGIApp, limits: HttpLimits, uploads: Collection[str] = ()) -> None:
        self.app = app
        self.limits = limits
        self.uploads = frozenset(uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope["path"] in self.uploads
        limit = self.limits.max_file if upload else self.limits.max_body
        exchange = _Exchange(limit, self.limits.read_timeout, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer(send, *exchange.too_large(declared))
            return
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception as ex:
            if exchange.started:
                raise  # a response cut short: only closing the connection tells the client
            if exchange.refusal is None:
                logger.exception("unexpected error answering %s %s", scope["method"], scope["path"])
                await _answer(send, *_internal_error(ex))
                return
        if exchange.refusal is not None and not exchange.started:
            await _answer(send, *exchange.refusal)


class _Exchange:
    """One request's body as it is read, and whether its response has begun."""

    def __init__(self, limit: int, timeout: float, receive: Receive, send: Send) -> None:
        self._limit = limit
        self._timeout = timeout
        self._receive = receive
        self._send = send
        self._received = 0
        self._body_done = False
        self.started = False
        self.refusal: tuple[int, dict[str, Any]] | None = None

    def too_large(self, size: int) -> tuple[int, dict[str, Any]]:
        detail = (
            f"body: {size} bytes or more, over this server's limit of {self._limit} bytes; "
            "send less at a time"
        )
        return 413, error_object("body_too_large", detail, "body")

    async def receive(self) -> Message:
        if self.refusal is not None:
            return {"type": "http.disconnect"}
        if self._body_done:  # the body is in; the app waits for a disconnect, however long
            return await self._receive()
        with anyio.move_on_after(self._timeout) as waited:
            message = await self._receive()
        if waited.cancelled_caught:
            detail = f"the request body paused for over {self._timeout:g}s; send it at once"
            self.refusal = 408, error_object("request_timeout", detail)
            raise _Refused(detail)
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            self._body_done = not message.get("more_body", False)
            if self._received > self._limit:
                self.refusal = self.too_large(self._received)
                raise _Refused(self.refusal[1]["detail"])
        return message

    async def send(self, message: Message) -> None:
        if self.refusal is not None and not self.started:
            return  # the app's answer to a refused body: the edge answers instead
        self.started = True
        await self._send(message)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # h11 has refused it already
    return None


def _internal_error(ex: Exception) -> tuple[int, dict[str, Any]]:
    detail = f"internal error ({type(ex).__name__}); the server's log has its cause"
    return 500, error_object("internal_error", detail)


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    """A JSON answer; one that refuses a body closes the connection, whose rest is unread."""
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    if status != 500:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def http_protocol(read_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose next request's head has not come
    in within `read_timeout` seconds (of its opening, or of the last response's end)."""

    class Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _waiting: RequestResponseCycle | None = None
        """The cycle that was current when the deadline was set: a new one is a new head."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._await_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._deadline is not None and self.cycle is not self._waiting:
                self._stop_waiting()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # unless a pipelined request has begun, or the connection is ending
            if self.cycle.response_complete and not self.transport.is_closing():
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            self._stop_waiting()
            self._waiting = self.cycle
            self._deadline = self.loop.call_later(read_timeout, self._too_slow)

        def _stop_waiting(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return Protocol
