"""The API's view of runs, in memory: a poll is answered from JSON encoded once per change.

Building a run's object from SQLite on every `GET /api/swarms/{id}` costs time in proportion
to its sandboxes, and clients poll. So each run asked for (or started) keeps its rows in
memory; the engine applies every change it writes to SQLite to the view too, and each sandbox
is encoded again only after it changed. SQLite stays the record: a view that is not in memory
is loaded from it, so evicting one never loses anything.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ._keys import Owner
from ._schema import Size
from ._store import ENDED, STATUSES, Store

_CACHE_BYTES = 64 * 1024**2
"""What the encoded sandboxes of completed runs kept in memory may add up to."""


def iso(timestamp: float | None) -> str | None:
    """A UNIX time as ISO 8601 (UTC), or None."""
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def sandbox_object(row: Any) -> dict[str, Any]:
    """One sandbox as the API shows it (a line of the results JSONL)."""
    obj: dict[str, Any] = {
        "index": row["idx"],
        "status": row["status"],
        "sandboxId": row["sandbox_id"],
        "exitCode": row["exit_code"],
        "stdoutTail": row["stdout_tail"],
        "stderrTail": row["stderr_tail"],
        "result": row["result"],
        "error": row["error"],
        "startedAt": iso(row["started_at"]),
        "endedAt": iso(row["ended_at"]),
    }
    if row["result_encoding"]:
        obj["resultEncoding"] = row["result_encoding"]
    return obj


def long_lived_object(row: Any, access: Mapping[str, str] | None) -> dict[str, Any]:
    """A long-lived sandbox as `/v1/sandboxes` shows it (with `access` while it runs)."""
    running = row["ended_at"] is None
    obj: dict[str, Any] = {
        "sandboxId": row["sandbox_id"],
        "status": "running" if running else "ended",
        "template": row["template"],
        "size": Size(vcpus=row["vcpus"], memoryGb=row["memory_gb"]).wire(),
        "metadata": json.loads(row["metadata"]),
        "leaseId": row["lease_id"],
        "swarmId": None,
        "startedAt": iso(row["started_at"]),
        "endAt": iso(row["end_at"]) if running else None,
        "endedAt": iso(row["ended_at"]),
        "endReason": row["end_reason"],
    }
    if running and access is not None:
        obj.update(access)
    return obj


def run_object(
    run: Mapping[str, Any], counts: Mapping[str, int], isolation: Mapping[str, object]
) -> dict[str, Any]:
    """A run as `GET /api/swarms` lists it (without its sandboxes)."""
    spec = run["spec"]
    end = run["ended_at"] or time.time()
    return {
        "id": run["id"],
        "name": run["name"],
        "status": run["status"],
        "count": run["count"],
        "size": spec["size"],
        "concurrency": run["concurrency"],
        "counts": dict(counts),
        "done": sum(counts[s] for s in ENDED),
        "waitingReason": run["waiting_reason"],
        "error": run["error"],
        "durationSeconds": round(end - run["created_at"], 3),
        "estimatedCostCents": 0,
        "command": spec["command"],
        "timeoutSeconds": spec["timeoutSeconds"],
        "template": spec["template"],
        "resultPath": spec["resultPath"],
        "createdAt": iso(run["created_at"]),
        "endedAt": iso(run["ended_at"]),
        "leaseId": run["lease_id"],
        "isolation": isolation,
    }


def _run_row(row: Any) -> dict[str, Any]:
    run = dict(row)
    run["spec"] = json.loads(run["spec"])
    return run


class RunView:
    """One run's rows in memory, with each sandbox's JSON encoded once per change."""

    def __init__(
        self,
        run: dict[str, Any],
        sandboxes: list[dict[str, Any]],
        isolation: Mapping[str, object],
    ) -> None:
        self.run = run
        self._isolation = isolation
        self._sandboxes = sandboxes
        self._encoded = [b""] * len(sandboxes)
        self._stale = set(range(len(sandboxes)))
        """The sandboxes changed since they were last encoded."""
        self._array: bytes | None = None
        self.counts = dict.fromkeys(STATUSES, 0)
        for sandbox in sandboxes:
            self.counts[sandbox["status"]] += 1

    @property
    def size(self) -> int:
        """Roughly the bytes this view holds (its encoded sandboxes, once encoded)."""
        return len(self._array) if self._array is not None else 512 * len(self._sandboxes)

    def set_run(self, fields: Mapping[str, Any]) -> None:
        """Apply a change of the run's row."""
        self.run.update(fields)

    def set_sandbox(self, idx: int, fields: Mapping[str, Any]) -> None:
        """Apply a change of one sandbox's row."""
        sandbox = self._sandboxes[idx]
        if "status" in fields:
            self.counts[sandbox["status"]] -= 1
            self.counts[fields["status"]] += 1
        sandbox.update(fields)
        self._stale.add(idx)
        self._array = None

    def end_sandboxes(self, from_status: str, fields: Mapping[str, Any]) -> None:
        """Apply `fields` (with a new status) to every sandbox in `from_status`."""
        for sandbox in self._sandboxes:
            if sandbox["status"] == from_status:
                self.set_sandbox(sandbox["idx"], fields)

    def _sandbox_json(self) -> list[bytes]:
        for idx in self._stale:
            self._encoded[idx] = json.dumps(sandbox_object(self._sandboxes[idx])).encode()
        self._stale.clear()
        return self._encoded

    def summary(self) -> dict[str, Any]:
        """The run without its sandboxes."""
        return run_object(self.run, self.counts, self._isolation)

    def body(self) -> bytes:
        """The run with its sandboxes, as JSON."""
        if self._array is None:
            self._array = b"[" + b",".join(self._sandbox_json()) + b"]"
        head = json.dumps(self.summary()).encode()
        return head[:-1] + b', "sandboxes": ' + self._array + b"}"

    def results(self) -> bytes:
        """The results JSONL: one sandbox per line, in input order."""
        return b"".join(line + b"\n" for line in self._sandbox_json())


class Views:
    """The views of the runs asked for lately and of every unfinished run."""

    def __init__(self, store: Store, isolation: Mapping[str, object]) -> None:
        self.store = store
        self.isolation = isolation
        self._views: OrderedDict[str, RunView] = OrderedDict()

    def get(self, run_id: str, owner: Owner | None = None) -> RunView | None:
        """The view of a run (within `owner`'s reach, when given), loaded from SQLite if need
        be."""
        view = self._views.get(run_id)
        if view is None:
            row = self.store.run(run_id)
            if row is None:
                return None
            sandboxes = [dict(s) for s in self.store.sandboxes(run_id)]
            view = self._views[run_id] = RunView(_run_row(row), sandboxes, self.isolation)
            self._evict()
        else:
            self._views.move_to_end(run_id)
        if owner is not None and not owner.owns(view.run["account"], view.run["lineage"]):
            return None
        return view

    def _evict(self) -> None:
        held = sum(view.size for view in self._views.values())
        for run_id, view in list(self._views.items()):
            if held <= _CACHE_BYTES:
                return
            if view.run["status"] == "completed":
                held -= view.size
                del self._views[run_id]

    def summaries(self, owner: Owner) -> list[dict[str, Any]]:
        """The runs within `owner`'s reach, newest first, without their sandboxes."""
        summaries = []
        for row in self.store.runs(owner):
            view = self._views.get(row["id"])
            if view is not None:
                summaries.append(view.summary())
            else:
                counts = self.store.counts(row["id"])
                summaries.append(run_object(_run_row(row), counts, self.isolation))
        return summaries

    def set_run(self, run_id: str, fields: Mapping[str, Any]) -> None:
        """Apply a change of a run's row to its view, if one is in memory."""
        if (view := self._views.get(run_id)) is not None:
            view.set_run(fields)

    def set_sandbox(self, run_id: str, idx: int, fields: Mapping[str, Any]) -> None:
        """Apply a change of a sandbox's row to its run's view, if one is in memory."""
        if (view := self._views.get(run_id)) is not None:
            view.set_sandbox(idx, fields)

    def end_sandboxes(self, run_id: str, from_status: str, fields: Mapping[str, Any]) -> None:
        """Apply a change of every sandbox of a run in `from_status`, if in memory."""
        if (view := self._views.get(run_id)) is not None:
            view.end_sandboxes(from_status, fields)
