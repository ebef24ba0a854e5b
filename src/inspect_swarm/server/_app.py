"""The Swarms API over HTTP (FastAPI): routes, bearer-key auth and JSON errors."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from ._access_log import AccessLog, note_caller
from ._edge import Edge, HttpLimits
from ._engine import Engine
from ._keys import Owner
from ._limits import MAX_NAME, check_text
from ._schema import (
    ApiError,
    invalid,
    json_body,
    parse_sandbox,
    parse_start,
    refusing_bad_input,
)
from ._store import Lease
from ._views import RunView, sandbox_object
from .e2b import UPLOAD_PATHS, mount_e2b
from .e2b._sandboxes import E2BSandboxes

PROVISION = "provision"
READ = "read"
ALL_SCOPES = frozenset({READ, PROVISION})


@dataclass(frozen=True)
class Principal:
    """Who is calling: whose records its key reaches, what it may do, and the key itself."""

    owner: Owner
    scopes: frozenset[str]
    key: str


class Keys:
    """The bearer keys this server accepts: its own keys (one account each), and the `mlk_`
    keys made for those accounts while their lease is open (see `_keys`)."""

    def __init__(self, keys: Mapping[str, frozenset[str]], engine: Engine) -> None:
        self._keys = dict(keys)
        self._scopes = {account_of(key): scopes for key, scopes in keys.items()}
        self._engine = engine

    @property
    def accounts(self) -> frozenset[str]:
        """The accounts of this server's keys."""
        return frozenset(self._scopes)

    def principal(self, request: Request, scope: str) -> Principal:
        """Authenticate the request and check that its key has `scope`."""
        header = request.headers.get("authorization", "")
        kind, _, key = header.partition(" ")
        if kind.lower() != "bearer" or not key.strip():
            raise ApiError(401, "unauthorized", "missing API key: send Authorization: Bearer <key>")
        principal = self.identify(request, key.strip())
        if principal is None:
            raise ApiError(401, "unauthorized", "unknown API key")
        if scope not in principal.scopes:
            raise ApiError(
                403, "insufficient_scope", f"this API key lacks the {scope!r} scope needed here"
            )
        return principal

    def identify(self, request: Request, key: str) -> Principal | None:
        """`lookup`, noting who made the request for its log line."""
        principal = self.lookup(key)
        if principal is not None:
            note_caller(request, principal.owner)
        return principal

    def lookup(self, key: str) -> Principal | None:
        """Who a key stands for: a server key's account, or what a key made for an account
        that still has a server key reaches (None if unknown)."""
        if key in self._keys:
            return Principal(Owner(account_of(key)), self._keys[key], key)
        made = self._engine.store.key(key)
        if made is None or (scopes := self._scopes.get(made["account"])) is None:
            return None
        return Principal(Owner(made["account"], made["lineage"]), scopes, key)


def account_of(key: str) -> str:
    """The account a server key stands for (one account per key)."""
    return "acct_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _error(ex: ApiError) -> JSONResponse:
    return JSONResponse(ex.body(), status_code=ex.status, headers=ex.headers)


def create_app(
    engine: Engine, keys: Mapping[str, frozenset[str]], limits: HttpLimits | None = None
) -> FastAPI:
    """The FastAPI application of one swarm server (its scheduler runs in the lifespan)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(engine.serve)
                yield
                tg.cancel_scope.cancel()
        finally:
            # here, not after uvicorn returns: it re-raises SIGTERM once the lifespan has ended
            await engine.host.aclose()
            engine.host.cgroups.remove_base()

    app = FastAPI(
        title="inspect-swarm server",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    limits = limits or HttpLimits()
    app.add_middleware(Edge, limits=limits, uploads=UPLOAD_PATHS)
    app.add_middleware(AccessLog)  # outermost: its time is the whole answer's
    auth = Keys(keys, engine)
    store = engine.store
    sandboxes = E2BSandboxes(engine)
    mount_e2b(app, sandboxes, auth, limits.max_file)
    engine.close_accounts(auth.accounts)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, ex: ApiError) -> JSONResponse:
        return _error(ex)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, ex: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(ex.status_code, "http_error")
        return _error(ApiError(ex.status_code, code, str(ex.detail)))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, ex: RequestValidationError) -> JSONResponse:
        first = ex.errors()[0]
        field = ".".join(str(p) for p in first["loc"][1:]) or "body"
        return _error(invalid(field, first["msg"]))

    def run_view(run_id: str, owner: Owner) -> RunView:
        view = engine.views.get(run_id, owner)
        if view is None:
            raise ApiError(404, "not_found", f"no swarm run {run_id!r}")
        return view

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        stopped = engine.stopped
        health = {
            "status": "ok" if stopped is None else "stopped",
            "isolation": engine.host.describe(),
            "maxRunning": engine.max_running,
        }
        if stopped is not None:
            health["reason"] = stopped
        return JSONResponse(health, status_code=200 if stopped is None else 503)

    @app.post("/api/swarms")
    async def start(request: Request) -> Response:
        who = auth.principal(request, PROVISION)
        raw = json_body(await request.body())
        body = parse_start(raw)
        key = _idempotency_key(request)
        run, created = engine.start(who.owner, raw, body, key)
        return _run_json(run, 201 if created else 200)

    @app.get("/api/swarms")
    async def list_runs(request: Request) -> dict[str, Any]:
        who = auth.principal(request, READ)
        return {"swarms": engine.views.summaries(who.owner)}

    @app.get("/api/swarms/access")
    async def access(request: Request) -> dict[str, Any]:
        auth.principal(request, READ)
        allowed = engine.settings.plan == "scale"
        return {
            "access": allowed,
            "plan": engine.settings.plan,
            "maxSandboxesPerRun": engine.settings.max_sandboxes,
            "reason": None if allowed else "this server does not offer Swarms (plan none)",
        }

    @app.get("/api/swarms/{run_id}")
    async def get_run(run_id: str, request: Request) -> Response:
        who = auth.principal(request, READ)
        return _run_json(run_view(run_id, who.owner))

    @app.get("/api/swarms/{run_id}/results")
    async def results(run_id: str, request: Request) -> Response:
        who = auth.principal(request, READ)
        results = run_view(run_id, who.owner).results()
        return Response(results, media_type="application/x-ndjson")

    @app.post("/api/swarms/{run_id}/cancel")
    async def cancel(run_id: str, request: Request) -> Response:
        who = auth.principal(request, PROVISION)
        view = run_view(run_id, who.owner)
        engine.cancel(run_id)
        return _run_json(view)

    def lease_object(lease: Lease, who: Principal) -> dict[str, Any]:
        # a sandbox's key is shown itself, never the lease's key
        key = who.key if who.owner.sandbox_key else engine.lease_key(lease)
        return engine.lease_object(lease, key)

    @app.get("/v1/servers")
    async def servers(request: Request) -> dict[str, Any]:
        who = auth.principal(request, READ)
        lease = store.open_lease()
        mine = lease is not None and lease.account == who.owner.account
        state = "available" if lease is None else "yours" if mine else "busy"
        return {
            "servers": [
                {
                    "id": "local",
                    "state": state,
                    "memoryGib": engine.settings.memory_gib,
                    "isolation": engine.host.describe(),
                }
            ],
            "lease": lease_object(lease, who) if mine and lease else None,
            "eligible": engine.settings.plan == "scale",
        }

    @app.post("/v1/servers/lease")
    async def lease(request: Request) -> JSONResponse:
        who = auth.principal(request, PROVISION)
        held, created = engine.lease(who.owner.account)
        return JSONResponse(lease_object(held, who), status_code=201 if created else 200)

    @app.delete("/v1/servers/lease")
    async def release(request: Request) -> dict[str, Any]:
        who = auth.principal(request, PROVISION)
        if who.owner.sandbox_key:
            raise ApiError(
                403,
                "sandbox_key",
                "DELETE /v1/servers/lease: a sandbox's key cannot release the lease (it would "
                "end every sandbox on it); release it with the account's key",
            )
        held = store.open_lease()
        if held is None or held.account != who.owner.account:
            raise ApiError(404, "no_lease", "you do not rent this server")
        engine.release(held, "released")
        ended = store.lease(held.id)
        assert ended is not None
        return engine.lease_object(ended, None)

    def swarm_sandbox(sandbox_id: str, owner: Owner) -> dict[str, Any] | None:
        row = store.sandbox(sandbox_id)
        if row is None or store.run(row["run_id"], owner) is None:
            return None
        return {**sandbox_object(row), "swarmId": row["run_id"]}

    def long_lived_sandbox(sandbox_id: str, owner: Owner) -> dict[str, Any]:
        found = sandboxes.lookup(sandbox_id, owner)
        if found is None:
            raise ApiError(404, "not_found", f"no sandbox {sandbox_id!r}")
        return found

    @app.post("/v1/sandboxes")
    async def create_sandbox(request: Request) -> JSONResponse:
        who = auth.principal(request, PROVISION)
        data = await request.body()
        body = parse_sandbox(json_body(data) if data else {})
        engine.check_sandbox(body)
        box = await sandboxes.start(
            who.owner,
            body.template or "base",
            body.size,
            body.timeoutSeconds or engine.settings.default_timeout,
            body.metadata,
            body.env,
        )
        return JSONResponse(sandboxes.describe(box), status_code=201)

    @app.get("/v1/sandboxes")
    async def list_sandboxes(request: Request) -> dict[str, Any]:
        who = auth.principal(request, READ)
        return {"sandboxes": [sandboxes.describe(box) for box in reversed(sandboxes.of(who.owner))]}

    @app.get("/v1/sandboxes/{sandbox_id}")
    async def sandbox(sandbox_id: str, request: Request) -> dict[str, Any]:
        who = auth.principal(request, READ)
        found = swarm_sandbox(sandbox_id, who.owner)
        return found or long_lived_sandbox(sandbox_id, who.owner)

    @app.delete("/v1/sandboxes/{sandbox_id}")
    async def kill_sandbox(sandbox_id: str, request: Request) -> dict[str, Any]:
        who = auth.principal(request, PROVISION)
        if (found := swarm_sandbox(sandbox_id, who.owner)) is not None:
            run_id = found["swarmId"]
            raise ApiError(
                409,
                "swarm_sandbox",
                f"sandbox {sandbox_id!r} belongs to swarm run {run_id}; cancel the run "
                f"instead (POST /api/swarms/{run_id}/cancel)",
            )
        if (box := sandboxes.live(sandbox_id, who.owner)) is not None:
            await sandboxes.kill(box)
        return long_lived_sandbox(sandbox_id, who.owner)

    return app


def _run_json(run: RunView, status: int = 200) -> Response:
    # pre-encoded: FastAPI's own encoding of a large run would cost more than the rest
    return Response(run.body(), status_code=status, media_type="application/json")


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key") or None
    if key is not None:
        with refusing_bad_input():
            check_text("Idempotency-Key", key, control=False, most=MAX_NAME)
    return key
