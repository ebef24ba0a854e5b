"""The Swarms API's JSON objects, built here from the domain's records and nowhere else.

Every assumption about details the spec leaves open is made here or in `edge._schema`, once:
- run `status` is `queued` (nothing started yet), `running`, then `completed` (also after
  cancel);
- `GET /api/swarms` answers `{"swarms": [...]}`, newest first, unpaginated;
- the stderr tail is `stderrTail`; `result` is UTF-8 text, else base64 with
  `"resultEncoding": "base64"`; `estimatedCostCents` is 0 on this server;
- errors are `{"detail": message, "code": code}` (plus `"field"` for validation).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..._swarms_api import QUOTA_WIRE, START_FIELDS
from ..model._types import (
    ENDED,
    Access,
    AccountState,
    Health,
    LeaseState,
    LongLivedRecord,
    RunRecord,
    RunSpec,
    SandboxRecord,
    ServerState,
    Size,
)

ENVD_VERSION = "0.6.2"
"""The envd protocol version this server speaks (gates the E2B SDK's features)."""


def iso(timestamp: float | None) -> str | None:
    """A UNIX time as ISO 8601 (UTC), or None."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def size_object(size: Size) -> dict[str, Any]:
    """A `size` object."""
    return {"name": size.name, "vcpus": size.vcpus, "memoryGb": size.memory_gb}


def spec_object(spec: RunSpec) -> dict[str, Any]:
    """What every sandbox of a run runs, by the start's wire names (`resultPath`...)."""
    command = spec.command if isinstance(spec.command, str) else list(spec.command)
    values = {
        "command": command,
        "size": size_object(spec.size),
        "timeout_seconds": spec.timeout_seconds,
        "template": spec.template,
        "result_path": spec.result_path,
    }
    return {START_FIELDS[name].wire: value for name, value in values.items()}


def sandbox_object(sandbox: SandboxRecord) -> dict[str, Any]:
    """A sandbox of a run (a line of the results JSONL)."""
    obj: dict[str, Any] = {
        "index": sandbox.idx,
        "status": sandbox.status,
        "sandboxId": sandbox.sandbox_id,
        "exitCode": sandbox.exit_code,
        "stdoutTail": sandbox.stdout_tail,
        "stderrTail": sandbox.stderr_tail,
        "result": sandbox.result,
        "error": sandbox.error,
        "startedAt": iso(sandbox.started_at),
        "endedAt": iso(sandbox.ended_at),
        "node": sandbox.node,
    }
    if sandbox.result_encoding:
        obj["resultEncoding"] = sandbox.result_encoding
    return obj


def run_object(
    run: RunRecord, counts: Mapping[str, int], isolation: Mapping[str, object]
) -> dict[str, Any]:
    """A run as `GET /api/swarms` lists it (without its sandboxes)."""
    spec = run.spec
    end = run.ended_at or time.time()
    return {
        "id": run.id,
        "name": run.name,
        "status": run.status,
        "count": run.count,
        "concurrency": run.concurrency,
        "counts": dict(counts),
        "done": sum(counts[s] for s in ENDED),
        "waitingReason": run.waiting_reason,
        "error": run.error,
        "durationSeconds": round(end - run.created_at, 3),
        "estimatedCostCents": 0,
        **spec_object(spec),
        "createdAt": iso(run.created_at),
        "endedAt": iso(run.ended_at),
        "leaseId": run.lease_id,
        "isolation": isolation,
    }


def envd_access(url: str, token: str) -> dict[str, str]:
    """What a live long-lived sandbox's E2B daemon needs: its address (one for every
    sandbox, routed by `E2b-Sandbox-Id`), its envd version and the sandbox's access token."""
    return {"envdUrl": url, "envdVersion": ENVD_VERSION, "envdAccessToken": token}


def long_lived_object(
    record: LongLivedRecord, access: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A long-lived sandbox as `/v1/sandboxes` shows it (with `access` while it runs)."""
    running = record.ended_at is None
    obj: dict[str, Any] = {
        "sandboxId": record.sandbox_id,
        "status": "running" if running else "ended",
        "template": record.template,
        "size": size_object(record.size),
        "metadata": dict(record.metadata),
        "leaseId": record.lease_id,
        "swarmId": None,
        "startedAt": iso(record.started_at),
        "endAt": iso(record.end_at) if running else None,
        "endedAt": iso(record.ended_at),
        "endReason": record.end_reason,
        "node": record.node,
    }
    if running and access is not None:
        obj.update(access)
    return obj


def run_sandbox_object(sandbox: SandboxRecord) -> dict[str, Any]:
    """A run's sandbox as `GET /v1/sandboxes/{id}` shows it."""
    return {**sandbox_object(sandbox), "swarmId": sandbox.run_id}


def account_object(state: AccountState, key: str | None = None) -> dict[str, Any]:
    """An account added while the server runs, with its quotas (and, once, its new `key`)."""
    account, quotas = state.account, state.quotas
    obj: dict[str, Any] = {
        "id": account.id,
        "name": account.name,
        "scopes": sorted(account.scopes),
        "quotas": {wire: getattr(quotas, name) for name, wire in QUOTA_WIRE.items()},
        "ownQuotas": sorted(QUOTA_WIRE[name] for name in account.quotas),
        "createdAt": iso(account.created_at),
        "rotatedAt": iso(account.rotated_at),
    }
    if key is not None:
        obj["apiKey"] = key
    return obj


def lease_object(state: LeaseState) -> dict[str, Any]:
    """A lease, with its key and the variables that carry it when `state` has them (only
    for the lease's own account, while it is open)."""
    lease = state.lease
    is_open = lease.released_at is None
    obj: dict[str, Any] = {
        "id": lease.id,
        "server": "local",
        "memoryGib": state.memory_gib,
        "memoryUsedGib": state.booked_gib if is_open else 0,
        "sandboxes": state.sandboxes if is_open else 0,
        "pricePerMinuteUsd": 0.0,
        "startedAt": iso(lease.started_at),
        "releasedAt": iso(lease.released_at),
        "releaseReason": lease.release_reason,
    }
    if state.key is not None and is_open:
        obj["apiKey"] = state.key
        obj["env"] = dict(state.env)
    return obj


def servers_object(state: ServerState) -> dict[str, Any]:
    """`GET /v1/servers`: this one server, and the caller's lease of it."""
    server = {
        "id": "local",
        "state": state.state,
        "memoryGib": state.memory_gib,
        "isolation": state.isolation,
    }
    lease = None if state.lease is None else lease_object(state.lease)
    return {"servers": [server], "lease": lease, "eligible": state.eligible}


def access_object(access: Access) -> dict[str, Any]:
    """`GET /api/swarms/access`: whether this server offers Swarms."""
    return {
        "access": access.offered,
        "plan": access.plan,
        "maxSandboxesPerRun": access.max_sandboxes,
        "reason": access.reason,
    }


def health_object(health: Health) -> dict[str, Any]:
    """`GET /healthz`: whether the scheduler runs (and why not), and the isolation."""
    obj: dict[str, Any] = {
        "status": "ok" if health.stopped is None else "stopped",
        "isolation": health.isolation,
        "maxRunning": health.max_running,
    }
    if health.stopped is not None:
        obj["reason"] = health.stopped
    return obj


def error_object(code: str, detail: str, field: str | None = None) -> dict[str, Any]:
    """An error's body."""
    body: dict[str, Any] = {"detail": detail, "code": code}
    if field is not None:
        body["field"] = field
    return body
