"""The Swarms API's routes: each authenticates its caller (`edge._auth`), turns the request into
the domain's terms (`_schema`), asks the domain (`Swarms`), and answers in the wire's shape
(`records._wire`). Domain errors are answered by the app's handler (`edge._app`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..domain._long_lived import LongLivedSandbox
from ..domain._swarms import Swarms
from ..model._rules import MAX_NAME, check_text
from ..model._types import Lease, LongLivedRecord, SandboxRecord, refusing_bad_input
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
from ._auth import Principal, Provisioner, Reader, Releaser
from ._schema import json_body, parse_sandbox, start_request


def routes(swarms: Swarms) -> APIRouter:
    """The Swarms API's routes over `swarms` (bound here rather than as a dependency: solving
    one costs more than the rest of a poll's route)."""
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> JSONResponse:
        stopped = swarms.stopped
        health = health_object(stopped, swarms.isolation, swarms.max_running)
        return JSONResponse(health, status_code=200 if stopped is None else 503)

    # runs

    @router.post("/api/swarms")
    async def start(request: Request, who: Provisioner) -> Response:
        raw = json_body(await request.body())
        run, created = swarms.start(who.owner, start_request(raw, _idempotency_key(request)))
        return _run_json(run, 201 if created else 200)

    @router.get("/api/swarms")
    async def list_runs(who: Reader) -> dict[str, Any]:
        return {"swarms": swarms.summaries(who.owner)}

    @router.get("/api/swarms/access")
    async def access(_: Reader) -> dict[str, Any]:
        return access_object(swarms.settings.plan, swarms.settings.max_sandboxes)

    @router.get("/api/swarms/{run_id}")
    async def get_run(run_id: str, who: Reader) -> Response:
        return _run_json(swarms.run(run_id, who.owner))

    @router.get("/api/swarms/{run_id}/results")
    async def results(run_id: str, who: Reader) -> Response:
        results = swarms.run(run_id, who.owner).results()
        return Response(results, media_type="application/x-ndjson")

    @router.post("/api/swarms/{run_id}/cancel")
    async def cancel(run_id: str, who: Provisioner) -> Response:
        return _run_json(swarms.cancel(run_id, who.owner))

    # the lease

    @router.get("/v1/servers")
    async def servers(who: Reader) -> dict[str, Any]:
        lease = swarms.leases.current()
        mine = lease is not None and lease.account == who.owner.account
        state = "available" if lease is None else "yours" if mine else "busy"
        return servers_object(
            state,
            swarms.settings.memory_gib,
            swarms.isolation,
            _lease_json(swarms, lease, who) if mine and lease else None,
            swarms.settings.plan == "scale",
        )

    @router.post("/v1/servers/lease")
    async def lease(who: Provisioner) -> JSONResponse:
        held, created = swarms.rent(who.owner.account)
        return JSONResponse(_lease_json(swarms, held, who), status_code=201 if created else 200)

    @router.delete("/v1/servers/lease")
    async def release(who: Releaser) -> dict[str, Any]:
        ended = swarms.leases.release_by(who.owner.account)
        return lease_object(ended, swarms.settings.memory_gib, swarms.booked_gb, swarms.running)

    # sandboxes

    @router.post("/v1/sandboxes")
    async def create_sandbox(request: Request, who: Provisioner) -> JSONResponse:
        data = await request.body()
        body = parse_sandbox(json_body(data) if data else {})
        box = await swarms.create_sandbox(
            who.owner,
            body.template,
            body.size.domain(),
            body.timeoutSeconds,
            body.metadata,
            body.env,
        )
        return JSONResponse(_sandbox_json(swarms, box), status_code=201)

    @router.get("/v1/sandboxes")
    async def list_sandboxes(who: Reader) -> dict[str, Any]:
        boxes = reversed(swarms.sandboxes.of(who.owner))
        return {"sandboxes": [_sandbox_json(swarms, box) for box in boxes]}

    @router.get("/v1/sandboxes/{sandbox_id}")
    async def sandbox(sandbox_id: str, who: Reader) -> dict[str, Any]:
        return _sandbox_json(swarms, swarms.sandbox(sandbox_id, who.owner))

    @router.delete("/v1/sandboxes/{sandbox_id}")
    async def kill_sandbox(sandbox_id: str, who: Provisioner) -> dict[str, Any]:
        return long_lived_object(await swarms.kill_sandbox(sandbox_id, who.owner))

    return router


# answers


def _run_json(run: RunView, status: int = 200) -> Response:
    # pre-encoded: FastAPI's own encoding of a large run would cost more than the rest
    return Response(run.body(), status_code=status, media_type="application/json")


def _lease_json(swarms: Swarms, lease: Lease, who: Principal) -> dict[str, Any]:
    """The caller's open lease, with the key that acts for it: a sandbox's key is shown
    itself, never the lease's."""
    keyring = swarms.keyring
    key = who.key if who.owner.sandbox_key else keyring.lease_key(lease)
    return lease_object(
        lease,
        swarms.settings.memory_gib,
        swarms.booked_gb,
        swarms.running,
        key,
        keyring.env(lease, key),
    )


def _sandbox_json(
    swarms: Swarms, sandbox: SandboxRecord | LongLivedSandbox | LongLivedRecord
) -> dict[str, Any]:
    """A sandbox as `/v1/sandboxes` shows it: a run's, a live long-lived one (with what its
    E2B daemon needs), or an ended one."""
    if isinstance(sandbox, SandboxRecord):
        return run_sandbox_object(sandbox)
    if isinstance(sandbox, LongLivedSandbox):
        return long_lived_object(sandbox.record(), envd_access(swarms.keyring.url, sandbox.token))
    return long_lived_object(sandbox)


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key") or None
    if key is not None:
        with refusing_bad_input():
            check_text("Idempotency-Key", key, control=False, most=MAX_NAME)
    return key
