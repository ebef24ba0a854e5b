"""The shapes of the Swarms API's and `/v1`'s answers, as the OpenAPI document describes them
(`records._wire` builds the objects; the API tests check every answer against these shapes).

The requests' shapes are `_schema`'s models, made from the fields' one definition.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..model._types import SandboxStatus


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(_Answer):
    """What the API answers when it refuses a request or fails."""

    detail: str
    code: str
    field: str | None = None
    """The request's field at fault (bad input only)."""


class SizeObject(_Answer):
    """A sandbox's size, named `small` (2 vCPU, 4 GB) or `custom`."""

    name: Literal["small", "custom"]
    vcpus: int
    memoryGb: int


class SandboxObject(_Answer):
    """One sandbox of a run (also one line of the results JSONL)."""

    index: int
    status: SandboxStatus
    sandboxId: str | None
    exitCode: int | None
    stdoutTail: str | None
    stderrTail: str | None
    result: str | None
    resultEncoding: Literal["base64"] | None = None
    error: str | None
    startedAt: str | None
    endedAt: str | None
    node: str | None


class RunSummary(_Answer):
    """A run without its sandboxes, as runs are listed."""

    id: str
    name: str | None
    status: Literal["queued", "running", "completed"]
    count: int
    size: SizeObject
    concurrency: int
    counts: dict[str, int]
    done: int
    waitingReason: str | None
    error: str | None
    durationSeconds: float
    estimatedCostCents: float
    command: str | list[str]
    timeoutSeconds: int
    template: str
    resultPath: str | None
    createdAt: str
    endedAt: str | None
    leaseId: str | None
    isolation: dict[str, Any]


class RunObject(RunSummary):
    """A run with every sandbox."""

    sandboxes: list[SandboxObject]


class RunList(_Answer):
    """Your runs, newest first."""

    swarms: list[RunSummary]


class AccessObject(_Answer):
    """Whether this server offers Swarms to the caller."""

    access: bool
    plan: str
    maxSandboxesPerRun: int
    reason: str | None


class HealthObject(_Answer):
    """Whether the server's scheduler runs (and why not)."""

    status: Literal["ok", "stopped"]
    isolation: dict[str, Any]
    maxRunning: int
    reason: str | None = None


class QuotasObject(_Answer):
    """An account's quotas, its own or the server's defaults."""

    maxQueued: int
    runsPerMinute: int
    maxRunning: int
    maxMemoryGb: int


class AccountObject(_Answer):
    """An account added while the server runs; its key (`apiKey`) only as it is added or
    rotated."""

    id: str
    name: str
    scopes: list[Literal["read", "provision"]]
    quotas: QuotasObject
    ownQuotas: list[str]
    """The quotas it has in place of the server's defaults."""
    createdAt: str
    rotatedAt: str | None
    apiKey: str | None = None


class AccountList(_Answer):
    """The accounts added while the server runs, oldest first."""

    accounts: list[AccountObject]


class LeaseObject(_Answer):
    """A lease of the server; its own account's open lease also carries its key and the
    variables that hold it."""

    id: str
    server: str
    memoryGib: int
    memoryUsedGib: float
    sandboxes: int
    pricePerMinuteUsd: float
    startedAt: str
    releasedAt: str | None
    releaseReason: str | None
    apiKey: str | None = None
    env: dict[str, str] | None = None


class ServerObject(_Answer):
    """A swarm server and its state for the caller."""

    id: str
    state: Literal["available", "busy", "yours"]
    memoryGib: int
    isolation: dict[str, Any]


class ServersObject(_Answer):
    """Every server, the caller's open lease, and whether the caller may rent one."""

    servers: list[ServerObject]
    lease: LeaseObject | None
    eligible: bool


class LongLivedObject(_Answer):
    """A long-lived sandbox; while it runs, with its E2B daemon's address and token."""

    sandboxId: str
    status: Literal["running", "ended"]
    template: str
    size: SizeObject
    metadata: dict[str, str]
    leaseId: str | None
    swarmId: None
    startedAt: str
    endAt: str | None
    endedAt: str | None
    endReason: str | None
    node: str | None
    envdUrl: str | None = None
    envdVersion: str | None = None
    envdAccessToken: str | None = None


class RunSandboxObject(SandboxObject):
    """A run's sandbox looked up by its id."""

    swarmId: str


class SandboxList(_Answer):
    """Your live long-lived sandboxes, newest first."""

    sandboxes: list[LongLivedObject]
