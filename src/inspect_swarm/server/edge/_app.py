"""The swarm server's web application: its routes (the Swarms API's and the E2B surface's),
its edge, and how errors are answered; the domain runs in its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from importlib.metadata import version

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..domain._server import SwarmServer
from ..model._types import InvalidRequest, SwarmError
from ._access_log import AccessLog
from ._admin import ACCOUNTS_PATH, admin_routes
from ._auth import Keys
from ._errors import ApiError
from ._gate import Gate
from ._middleware import Edge, HttpLimits
from ._openapi import OPENAPI_PATH, openapi_document
from ._routes import KEYED_PATHS, routes
from .e2b import UPLOAD_PATHS, mount_e2b


def create_app(
    server: SwarmServer, keys: Mapping[str, frozenset[str]], limits: HttpLimits | None = None
) -> FastAPI:
    """The FastAPI application of one swarm server (its domain serves in the lifespan).

    `keys` are the server's own keys, one account each, with their scopes; an account with
    no key left has its lease closed. The app's gate (`app.state.gate`) holds the doors of its
    routes, for the connections' protocol.
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(server.serve)
                yield
                tg.cancel_scope.cancel()
        finally:
            # here, not after uvicorn returns: it re-raises SIGTERM once the lifespan has ended
            await server.aclose()

    app = FastAPI(
        title="inspect-swarm server",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=OPENAPI_PATH,  # public: it holds nothing of this server's
    )
    limits = limits or HttpLimits()
    app.add_middleware(Edge, limits=limits, uploads=UPLOAD_PATHS)
    app.add_middleware(AccessLog)  # outermost: its time is the whole answer's
    auth = Keys(keys, server)
    app.state.keys = auth
    # the Swarms API's routes first: a poll is matched before the E2B surface's are tried
    app.include_router(routes(server))
    app.include_router(admin_routes(server))
    gate = Gate()
    gate.add(auth.door(*KEYED_PATHS, ACCOUNTS_PATH, f"{ACCOUNTS_PATH}/"))
    mount_e2b(app, server, limits.max_file, gate)
    app.state.gate = gate
    server.close_accounts(auth.accounts)
    # made on the first request for it, once every route is in
    app.openapi = partial(openapi_document, app, version("inspect_swarm"))  # type: ignore[method-assign]

    answer_errors(app)
    return app


def answer_errors(app: FastAPI) -> None:
    """Answer the edge's refusals, the domain's errors, unknown paths and malformed input as
    the Swarms API's error objects."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, ex: ApiError) -> JSONResponse:
        return _answer(ex)

    @app.exception_handler(SwarmError)
    async def swarm_error(_: Request, ex: SwarmError) -> JSONResponse:
        return _answer(ApiError.of(ex))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, ex: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(ex.status_code, "http_error")
        return _answer(ApiError(ex.status_code, code, str(ex.detail)))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, ex: RequestValidationError) -> JSONResponse:
        first = ex.errors()[0]
        field = ".".join(str(p) for p in first["loc"][1:]) or "body"
        return _answer(ApiError.of(InvalidRequest(field, first["msg"])))


def _answer(ex: ApiError) -> JSONResponse:
    return JSONResponse(ex.body(), status_code=ex.status, headers=ex.headers)
