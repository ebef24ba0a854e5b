"""The Swarms API's routes: each authenticates its caller (`edge._auth`), turns the request into
the domain's terms (`_schema`), asks the domain (`SwarmServer`) one question, and answers in
the wire's shape (`records._wire`). Domain errors are answered by the app's handler
(`edge._app`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..domain._long_lived import LongLivedSandbox
from ..domain._server import SwarmServer
from ..model._rules import MAX_NAME, check_text
from ..model._types import LongLivedRecord, SandboxRecord, SandboxRequest, refusing_bad_input
from ..records._runs import RunView
from ..records._wire import (
    access_object,
    envd_access,
    health_object,
    lease_object,
    long_lived_object,
    run_sandbox_object,
    servers_object,
)
from ._auth import Provisioner, Reader
from ._schema import json_body, parse_sandbox, start_request


def routes(server: SwarmServer) -> APIRouter:
    """The Swarms API's routes over `server` (bound here rather than as a dependency: solving
    one costs more than the rest of a poll's route)."""
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> JSONResponse:
        health = server.health()
        return JSONResponse(
            health_object(health), status_code=200 if health.stopped is None else 503
        )

    # runs

    @router.post("/api/swarms")
    async def start(request: Request, who: Provisioner) -> Response:
        raw = json_body(await request.body())
        run, created = server.start(who.owner, start_request(raw, _idempotency_key(request)))
        return _run_json(run, 201 if created else 200)

    @router.get("/api/swarms")
    async def list_runs(who: Reader) -> dict[str, Any]:
        return {"swarms": server.summaries(who.owner)}

    @router.get("/api/swarms/access")
    async def access(_: Reader) -> dict[str, Any]:
        return access_object(server.access())

    @router.get("/api/swarms/{run_id}")
    async def get_run(run_id: str, who: Reader) -> Response:
        return _run_json(server.run(run_id, who.owner))

    @router.get("/api/swarms/{run_id}/results")
    async def results(run_id: str, who: Reader) -> Response:
        results = server.run(run_id, who.owner).results()
        return Response(results, media_type="application/x-ndjson")

    @router.post("/api/swarms/{run_id}/cancel")
    async def cancel(run_id: str, who: Provisioner) -> Response:
        return _run_json(server.cancel(run_id, who.owner))

    # the lease

    @router.get("/v1/servers")
    async def servers(who: Reader) -> dict[str, Any]:
        return servers_object(server.state(who.owner, who.key))

    @router.post("/v1/servers/lease")
    async def lease(who: Provisioner) -> JSONResponse:
        held, created = server.rent(who.owner, who.key)
        return JSONResponse(lease_object(held), status_code=201 if created else 200)

    @router.delete("/v1/servers/lease")
    async def release(who: Provisioner) -> dict[str, Any]:
        return lease_object(server.release(who.owner))

    # sandboxes

    @router.post("/v1/sandboxes")
    async def create_sandbox(request: Request, who: Provisioner) -> JSONResponse:
        data = await request.body()
        body = parse_sandbox(json_body(data) if data else {})
        wanted = SandboxRequest(
            body.template,
            body.image,
            body.size.domain(),
            body.timeoutSeconds,
            body.metadata,
            body.env,
        )
        box = await server.create_sandbox(who.owner, wanted)
        return JSONResponse(_sandbox_json(server, box), status_code=201)

    @router.get("/v1/sandboxes")
    async def list_sandboxes(who: Reader) -> dict[str, Any]:
        boxes = reversed(server.sandboxes(who.owner))
        return {"sandboxes": [_sandbox_json(server, box) for box in boxes]}

    @router.get("/v1/sandboxes/{sandbox_id}")
    async def sandbox(sandbox_id: str, who: Reader) -> dict[str, Any]:
        return _sandbox_json(server, server.sandbox(sandbox_id, who.owner))

    @router.delete("/v1/sandboxes/{sandbox_id}")
    async def kill_sandbox(sandbox_id: str, who: Provisioner) -> dict[str, Any]:
        return long_lived_object(await server.kill_sandbox(sandbox_id, who.owner))

    return router


# answers


def _run_json(run: RunView, status: int = 200) -> Response:
    # pre-encoded: FastAPI's own encoding of a large run would cost more than the rest
    return Response(run.body(), status_code=status, media_type="application/json")


def _sandbox_json(
    server: SwarmServer, sandbox: SandboxRecord | LongLivedSandbox | LongLivedRecord
) -> dict[str, Any]:
    """A sandbox as `/v1/sandboxes` shows it: a run's, a live long-lived one (with what its
    E2B daemon needs), or an ended one."""
    if isinstance(sandbox, SandboxRecord):
        return run_sandbox_object(sandbox)
    if isinstance(sandbox, LongLivedSandbox):
        return long_lived_object(sandbox.record(), envd_access(server.url, sandbox.token))
    return long_lived_object(sandbox)


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key") or None
    if key is not None:
        with refusing_bad_input():
            check_text("Idempotency-Key", key, control=False, most=MAX_NAME)
    return key
