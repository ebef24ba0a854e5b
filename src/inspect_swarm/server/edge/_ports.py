"""One server, two ports: the API's and the web console's."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class ByPort:
    """ASGI application that answers HTTP requests that came in on `port` with `console`,
    and everything else (the API's requests, the lifespan) with `api`."""

    def __init__(self, api: ASGIApp, console: ASGIApp, port: int) -> None:
        self.api = api
        self.console = console
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if scope["type"] == "http" and server is not None and server[1] == self.port:
            await self.console(scope, receive, send)
        else:
            await self.api(scope, receive, send)
