"""A log line for each request the server answers, at INFO (`inspect-swarm server -v`).

`GET /api/swarms/4f1c... 200 2.1ms acct_3b9e0c1d2a4f`: the method, the path (never its query,
which may carry a signed URL's token), the status, the time to answer, and who called: the
account of the key, with the sandbox lineage for a sandbox's key, or `-` before a key was
checked. Never a key itself.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..model._keys import Owner

logger = logging.getLogger("inspect_swarm.server.access")

_CALLER = "caller"
"""Where a request's state keeps who called, once their key is checked."""


def note_caller(request: Request, owner: Owner) -> None:
    """Record who made the request, for its log line."""
    setattr(request.state, _CALLER, owner.label)


class AccessLog:
    """ASGI middleware that logs each HTTP request when INFO is enabled."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not logger.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        began = time.perf_counter()
        try:
            await self.app(scope, receive, sending)
        finally:
            log_answer(scope["method"], scope["path"], status, began, state.get(_CALLER, "-"))


def log_answer(method: str, path: str, status: int, began: float, caller: str = "-") -> None:
    """Log one answered request (`status` 0: none was sent), begun at `began`
    (`time.perf_counter()`), when INFO is enabled."""
    elapsed = (time.perf_counter() - began) * 1000
    logger.info("%s %s %s %.1fms %s", method, path, status or "-", elapsed, caller)
