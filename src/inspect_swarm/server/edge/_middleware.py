"""The server's HTTP edge: body limits, read deadlines, and errors answered on a live connection.

`Edge` is ASGI middleware around the app: it refuses a head over 16 KiB with 400 (h11
refuses one only while it is incomplete, so a head that came in one piece would pass), a body
over its limit with 413 as soon as its declared length or its bytes so far pass it (never
buffering more), a body that stalls or comes too slowly with 408, closes the connection of
any request answered before its body was read (a refusal never reads the rest), and answers
an unexpected error as a JSON 500 without passing it on (Starlette's outermost middleware
re-raises every error it answers, and uvicorn then closes the connection, so one bad request
would cost a client its keep-alive connection). What applies before a request reaches the app
is the connections' protocol's (`_protocol`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._defaults import SERVER_DEFAULTS
from ..records._wire import error_object

MIB = 1024**2
KIB = 1024
MAX_HEAD = 16 * KIB
"""The largest request head (its line and headers), as h11 counts it while one comes in."""

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
    min_rate: int = SERVER_DEFAULTS.min_body_kib * KIB
    """The slowest a body may come, in bytes a second on average: a body has `read_timeout`
    seconds, and one more for each `min_rate` bytes of it, from its head's arrival."""
    max_client_connections: int = SERVER_DEFAULTS.max_client_connections
    """The most connections one client address may hold open at once."""


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
        declared = _content_length(scope)
        exchange = _Exchange(limit, self.limits, declared, _has_body(scope), receive, send)
        if (head := _head_size(scope)) > MAX_HEAD:
            detail = f"head: {head} bytes, over the limit of {MAX_HEAD}; send shorter headers"
            await _answer(send, 400, error_object("head_too_large", detail))
            return
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

    def __init__(
        self,
        limit: int,
        limits: HttpLimits,
        declared: int | None,
        has_body: bool,
        receive: Receive,
        send: Send,
    ) -> None:
        self._limit = limit
        self._timeout = limits.read_timeout
        self._rate = limits.min_rate
        self._declared = declared
        self._since = time.monotonic()
        self._receive = receive
        self._send = send
        self._received = 0
        self._body_done = not has_body
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
        deadline = self._deadline()
        with anyio.move_on_after(min(self._timeout, deadline - time.monotonic())) as waited:
            message = await self._receive()
        if waited.cancelled_caught:
            self.refusal = 408, error_object("request_timeout", self._too_slow(deadline))
            raise _Refused(self.refusal[1]["detail"])
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            self._body_done = not message.get("more_body", False)
            if self._received > self._limit:
                self.refusal = self.too_large(self._received)
                raise _Refused(self.refusal[1]["detail"])
        return message

    def _deadline(self) -> float:
        """When the body must be in: `read_timeout` and a second for each `min_rate` bytes of
        it (of a chunked body, of what came so far and one more chunk's worth)."""
        size = self._declared if self._declared is not None else self._received + self._rate
        return self._since + self._timeout + size / self._rate

    def _too_slow(self, deadline: float) -> str:
        if deadline - time.monotonic() > 0:
            return f"the request body paused for over {self._timeout:g}s; send it at once"
        return (
            f"the request body came slower than {self._rate} bytes a second after a "
            f"{self._timeout:g}s grace ({self._received} bytes in "
            f"{time.monotonic() - self._since:.0f}s); send it at once"
        )

    async def send(self, message: Message) -> None:
        if self.refusal is not None and not self.started:
            return  # the app's answer to a refused body: the edge answers instead
        if message["type"] == "http.response.start" and not self._body_done:
            # answered before its body was read (a refusal): the rest is never read
            message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
        self.started = True
        await self._send(message)


_CLOSE = (b"connection", b"close")


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return True
    return False


def _head_size(scope: Scope) -> int:
    """A request's head size, as it came: its request line and each header line."""
    line = len(scope["method"]) + len(scope["raw_path"]) + len(scope["query_string"]) + 12
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


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
        headers.append(_CLOSE)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
