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
from ..model._types import LongLivedRecord, SandboxRecord, refusing_bad_input
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
from ._answers import (
    AccessObject,
    HealthObject,
    LeaseObject,
    LongLivedObject,
    RunList,
    RunObject,
    RunSandboxObject,
    SandboxList,
    ServersObject,
)
from ._auth import Provisioner, Reader
from ._openapi import KEYED, Declared
from ._schema import SandboxBody, StartBody, json_body, sandbox_request, start_request

KEYED_PATHS = ("/api/swarms", "/api/swarms/", "/v1/")
"""The paths of the routes below that take a key (every one but `/healthz`), for the gate."""


def routes(server: SwarmServer) -> APIRouter:
    """The Swarms API's routes over `server` (bound here rather than as a dependency: solving
    one costs more than the rest of a poll's route)."""
    router = APIRouter()
    health_route = Declared(router, "health", {})
    runs_route = Declared(router, "runs", KEYED)
    lease_route = Declared(router, "lease", KEYED)
    sandboxes_route = Declared(router, "sandboxes", KEYED)

    @health_route(
        "GET",
        "/healthz",
        ok={200: HealthObject, 503: HealthObject},
        errors=(),
        summary="Whether the server's scheduler runs",
    )
    async def healthz() -> JSONResponse:
        health = server.health()
        return JSONResponse(
            health_object(health), status_code=200 if health.stopped is None else 503
        )

    # runs

    @runs_route(
        "POST",
        "/api/swarms",
        ok={201: RunObject, 200: RunObject},
        errors=(400, 401, 402, 403, 409, 429, 503),
        summary="Start a run (200: an idempotent retry's run)",
        body=StartBody,
    )
    async def start(request: Request, who: Provisioner) -> Response:
        raw = json_body(await request.body())
        run, created = server.start(who.owner, start_request(raw, _idempotency_key(request)))
        return _run_json(run, 201 if created else 200)

    @runs_route(
        "GET",
        "/api/swarms",
        ok={200: RunList},
        errors=(401, 403),
        summary="Your runs, newest first",
    )
    async def list_runs(who: Reader) -> dict[str, Any]:
        return {"swarms": server.summaries(who.owner)}

    @runs_route(
        "GET",
        "/api/swarms/access",
        ok={200: AccessObject},
        errors=(401, 403),
        summary="Whether Swarms are offered",
    )
    async def access(_: Reader) -> dict[str, Any]:
        return access_object(server.access())

    @runs_route(
        "GET",
        "/api/swarms/{run_id}",
        ok={200: RunObject},
        errors=(401, 403, 404),
        summary="A run with every sandbox",
    )
    async def get_run(run_id: str, who: Reader) -> Response:
        return _run_json(server.run(run_id, who.owner))

    @runs_route(
        "GET",
        "/api/swarms/{run_id}/results",
        ok={200: "application/x-ndjson"},
        errors=(401, 403, 404),
        summary="One line of JSON per sandbox (a SandboxObject), in index order",
    )
    async def results(run_id: str, who: Reader) -> Response:
        results = server.run(run_id, who.owner).results()
        return Response(results, media_type="application/x-ndjson")

    @runs_route(
        "POST",
        "/api/swarms/{run_id}/cancel",
        ok={200: RunObject},
        errors=(401, 403, 404),
        summary="Cancel a run",
    )
    async def cancel(run_id: str, who: Provisioner) -> Response:
        return _run_json(server.cancel(run_id, who.owner))

    # the lease

    @lease_route(
        "GET",
        "/v1/servers",
        ok={200: ServersObject},
        errors=(401, 403),
        summary="The server, its state and your lease",
    )
    async def servers(who: Reader) -> dict[str, Any]:
        return servers_object(server.state(who.owner, who.key))

    @lease_route(
        "POST",
        "/v1/servers/lease",
        ok={201: LeaseObject, 200: LeaseObject},
        errors=(401, 402, 403, 409),
        summary="Rent the server (200: the lease you hold)",
    )
    async def lease(who: Provisioner) -> JSONResponse:
        held, created = server.rent(who.owner, who.key)
        return JSONResponse(lease_object(held), status_code=201 if created else 200)

    @lease_route(
        "DELETE",
        "/v1/servers/lease",
        ok={200: LeaseObject},
        errors=(401, 403, 404),
        summary="Release your lease: every sandbox on it ends",
    )
    async def release(who: Provisioner) -> dict[str, Any]:
        return lease_object(server.release(who.owner))

    # sandboxes

    @sandboxes_route(
        "POST",
        "/v1/sandboxes",
        ok={201: LongLivedObject},
        errors=(400, 401, 402, 403, 404, 409, 429, 500, 503),
        summary="Start a long-lived sandbox",
        body=SandboxBody,
        body_required=False,
    )
    async def create_sandbox(request: Request, who: Provisioner) -> JSONResponse:
        data = await request.body()
        wanted = sandbox_request(json_body(data) if data else {})
        box = await server.create_sandbox(who.owner, wanted)
        return JSONResponse(_sandbox_json(server, box), status_code=201)

    @sandboxes_route(
        "GET",
        "/v1/sandboxes",
        ok={200: SandboxList},
        errors=(401, 403),
        summary="Your live long-lived sandboxes, newest first",
    )
    async def list_sandboxes(who: Reader) -> dict[str, Any]:
        boxes = reversed(server.sandboxes(who.owner))
        return {"sandboxes": [_sandbox_json(server, box) for box in boxes]}

    @sandboxes_route(
        "GET",
        "/v1/sandboxes/{sandbox_id}",
        ok={200: LongLivedObject | RunSandboxObject},
        errors=(401, 403, 404),
        summary="A sandbox: a run's, or a long-lived one",
    )
    async def sandbox(sandbox_id: str, who: Reader) -> dict[str, Any]:
        return _sandbox_json(server, server.sandbox(sandbox_id, who.owner))

    @sandboxes_route(
        "DELETE",
        "/v1/sandboxes/{sandbox_id}",
        ok={200: LongLivedObject},
        errors=(401, 403, 404, 409),
        summary="End a long-lived sandbox",
    )
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
