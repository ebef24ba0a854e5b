"""The E2B control plane's JSON objects and its error shape, built here and nowhere else."""

from __future__ import annotations

from typing import Any

from ...domain._long_lived import LongLivedSandbox
from ...model._types import SandboxMetric, SnapshotRecord, SwarmError, TemplateNotFound
from ...records._wire import ENVD_VERSION, iso
from .._errors import http_status

_STATUS: dict[type[SwarmError], int] = {TemplateNotFound: 404}
"""Where E2B's API answers a domain error otherwise than the Swarms API."""


class E2BError(Exception):
    """An error answered in E2B's shape, `{"code": status, "message": ...}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @classmethod
    def of(cls, error: SwarmError) -> E2BError:
        """A domain error as E2B's control plane answers it."""
        return cls(_STATUS.get(type(error)) or http_status(error), error.message)

    def body(self) -> dict[str, Any]:
        """The JSON body of the error."""
        return {"code": self.status, "message": self.message}


def created(box: LongLivedSandbox) -> dict[str, Any]:
    """The create and connect answer."""
    return {
        "templateID": box.template,
        "sandboxID": box.id,
        "clientID": "local",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": box.token,
        "trafficAccessToken": box.traffic_token,
        "domain": None,
    }


def listed(box: LongLivedSandbox) -> dict[str, Any]:
    """The list answer (the get answer adds its access token)."""
    return {
        "templateID": box.template,
        "sandboxID": box.id,
        "clientID": "local",
        "startedAt": iso(box.started_at),
        "endAt": iso(box.end_at),
        "cpuCount": box.size.vcpus,
        "memoryMB": box.size.memory_gb * 1024,
        "diskSizeMB": box.disk_mb,
        "state": box.state,
        "envdVersion": ENVD_VERSION,
        "metadata": box.metadata,
    }


def detailed(box: LongLivedSandbox) -> dict[str, Any]:
    """The get answer."""
    return {**listed(box), "envdAccessToken": box.token, "domain": None}


def measured(metric: SandboxMetric) -> dict[str, Any]:
    """One sample of the metrics answer."""
    return {
        "timestamp": iso(metric.at),
        "timestampUnix": int(metric.at),
        "cpuCount": metric.cpu_count,
        "cpuUsedPct": metric.cpu_used_pct,
        "memUsed": metric.memory_used,
        "memTotal": metric.memory_total,
        "memCache": metric.memory_cache,
        "diskUsed": metric.disk_used,
        "diskTotal": metric.disk_total,
    }


def snapshotted(snapshot: SnapshotRecord) -> dict[str, Any]:
    """A snapshot, as its create and the list answer it."""
    return {"snapshotID": snapshot.id, "names": [] if snapshot.name is None else [snapshot.name]}


def forked(fork: LongLivedSandbox | SwarmError) -> dict[str, Any]:
    """One fork of a fork's answer: the sandbox made, or the error that kept it from being."""
    if isinstance(fork, SwarmError):
        return {"error": E2BError.of(fork).body()}
    return {"sandbox": created(fork)}
