"""Runs and their sandboxes, recorded: the one write path of every change to either.

Each change is written to SQLite (the record, which outlives the server) and applied to the
run's view in memory, if it has one, in the same call; nothing else writes either.

The views answer the API's polls. Building a run's object from SQLite on every `GET
/api/swarms/{id}` costs time in proportion to its sandboxes, and clients poll; so each run
asked for (or started) keeps its records in memory, and each sandbox is encoded again only
after it changed. A view that is not in memory is loaded from SQLite, so evicting one never
loses anything.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ..model._keys import Owner
from ..model._types import (
    STATUSES,
    Outcome,
    RunRecord,
    SandboxInput,
    SandboxRecord,
)
from ._store import Store
from ._wire import run_object, sandbox_object

logger = logging.getLogger(__name__)

_CACHE_BYTES = 64 * 1024**2
"""What the encoded sandboxes of completed runs kept in memory may add up to."""


class RunView:
    """One run's records in memory, with each sandbox's JSON encoded once per change."""

    def __init__(
        self, run: RunRecord, sandboxes: list[SandboxRecord], isolation: Mapping[str, object]
    ) -> None:
        self.run = run
        """The run's record (read only: `Runs` makes every change)."""
        self._isolation = isolation
        self._sandboxes = sandboxes
        self._encoded = [b""] * len(sandboxes)
        self._stale = set(range(len(sandboxes)))
        """The sandboxes changed since they were last encoded."""
        self._array: bytes | None = None
        self.counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for sandbox in sandboxes:
            self.counts[sandbox.status] += 1

    @property
    def sandboxes(self) -> Sequence[SandboxRecord]:
        """The run's sandboxes in input order (read only: `Runs` makes every change)."""
        return self._sandboxes

    @property
    def size(self) -> int:
        """Roughly the bytes this view holds (its encoded sandboxes, once encoded)."""
        return len(self._array) if self._array is not None else 512 * len(self._sandboxes)

    def _set_run(self, fields: Mapping[str, Any]) -> None:
        for name, value in fields.items():
            setattr(self.run, name, value)

    def _set_sandbox(self, idx: int, fields: Mapping[str, Any]) -> None:
        sandbox = self._sandboxes[idx]
        if "status" in fields:
            self.counts[sandbox.status] -= 1
            self.counts[fields["status"]] += 1
        for name, value in fields.items():
            setattr(sandbox, name, value)
        self._stale.add(idx)
        self._array = None

    def _end_sandboxes(self, from_status: str, fields: Mapping[str, Any]) -> None:
        for sandbox in self._sandboxes:
            if sandbox.status == from_status:
                self._set_sandbox(sandbox.idx, fields)

    def _sandbox_json(self) -> list[bytes]:
        for idx in self._stale:
            self._encoded[idx] = json.dumps(sandbox_object(self._sandboxes[idx])).encode()
        self._stale.clear()
        return self._encoded

    def summary(self) -> dict[str, Any]:
        """The run without its sandboxes, as the API lists it."""
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


class Runs:
    """Every run's records: in SQLite, and in memory for unfinished runs and those asked
    for lately."""

    def __init__(self, store: Store, isolation: Mapping[str, object]) -> None:
        self.store = store
        self.isolation = isolation
        """The isolation every run reports (the sandbox host's)."""
        self._views: OrderedDict[str, RunView] = OrderedDict()
        self.changes = 0
        """How many changes runs and sandboxes have had since the server started: what was
        made from them at the same count is still right (the web console's pages)."""

    # reading

    def get(self, run_id: str, owner: Owner | None = None) -> RunView | None:
        """The view of a run (within `owner`'s reach, when given), loaded from SQLite if need
        be."""
        view = self._views.get(run_id)
        if view is None:
            run = self.store.run(run_id)
            if run is None:
                return None
            view = self._views[run_id] = RunView(run, self.store.sandboxes(run_id), self.isolation)
            self._evict()
        else:
            self._views.move_to_end(run_id)
        if owner is not None and not owner.owns(view.run.account, view.run.lineage):
            return None
        return view

    def _evict(self) -> None:
        held = sum(view.size for view in self._views.values())
        for run_id, view in list(self._views.items()):
            if held <= _CACHE_BYTES:
                return
            if view.run.status == "completed":
                held -= view.size
                del self._views[run_id]

    def records(self, owner: Owner) -> list[RunRecord]:
        """The records of the runs within `owner`'s reach, newest first."""
        return self.store.runs(owner)

    def summary(self, run: RunRecord) -> dict[str, Any]:
        """A run without its sandboxes, as the API lists it (its counts read from SQLite
        unless its view is in memory)."""
        view = self._views.get(run.id)
        if view is not None:
            return view.summary()
        return run_object(run, self.store.counts(run.id), self.isolation)

    def summaries(self, owner: Owner) -> list[dict[str, Any]]:
        """The runs within `owner`'s reach, newest first, without their sandboxes."""
        return [self.summary(run) for run in self.records(owner)]

    def sandbox(self, sandbox_id: str, owner: Owner) -> SandboxRecord | None:
        """A run's sandbox, if its run is within `owner`'s reach."""
        sandbox = self.store.sandbox(sandbox_id)
        if sandbox is None or self.store.run(sandbox.run_id, owner) is None:
            return None
        return sandbox

    def input(self, run_id: str, idx: int) -> tuple[str, SandboxInput]:
        """The id and the input of the run's sandbox at input index `idx`."""
        return self.store.sandbox_input(run_id, idx)

    def started_by(self, namespace: str, key: str) -> tuple[str, str] | None:
        """The run an idempotency key of `namespace` started, and its request's digest."""
        return self.store.idempotent(namespace, key)

    def unfinished(self) -> list[tuple[RunRecord, list[int]]]:
        """Each run not yet completed, oldest first, with the indexes of its queued sandboxes."""
        return [
            (run, [s.idx for s in self.store.sandboxes(run.id, "queued")])
            for run in self.store.unfinished_runs()
        ]

    # writing

    def insert(
        self,
        run: RunRecord,
        inputs: Sequence[SandboxInput],
        sandbox_ids: Sequence[str],
        idempotency: tuple[str, str, str] | None,
    ) -> RunView:
        """Record a new run with its queued sandboxes (and the idempotency key that started
        it: namespace, key, digest); its view."""
        self.store.insert_run(run, inputs, sandbox_ids, idempotency)
        self.changes += 1
        view = self.get(run.id)
        assert view is not None
        return view

    def set_running(self, run_id: str) -> None:
        """The run's first sandbox has started."""
        self._set_run(run_id, {"status": "running"})

    def set_waiting(self, run_id: str, reason: str | None) -> None:
        """Why the run's queued sandboxes wait (None: they do not)."""
        self._set_run(run_id, {"waiting_reason": reason})

    def set_error(self, run_id: str, error: str) -> None:
        """What stopped the run before its sandboxes could finish."""
        self._set_run(run_id, {"error": error})

    def set_completed(self, run_id: str) -> None:
        """Every sandbox of the run has ended."""
        fields = {"status": "completed", "waiting_reason": None, "ended_at": time.time()}
        self._set_run(run_id, fields)
        if logger.isEnabledFor(logging.INFO):
            counts = self.store.counts(run_id)
            ended = ", ".join(f"{counts[s]} {s}" for s in ("succeeded", "failed", "cancelled"))
            logger.info("run %s completed: %s", run_id, ended)

    def set_booting(self, run_id: str, idx: int, node: str | None = None) -> None:
        """A sandbox of the run is being made (on `node` of the engine's cluster, where the
        engine knows it already)."""
        fields: dict[str, Any] = {"status": "booting", "started_at": time.time()}
        if node is not None:
            fields["node"] = node
        self._set_sandbox(run_id, idx, fields)

    def set_node(self, run_id: str, idx: int, node: str) -> None:
        """A sandbox of the run has been placed on `node` of the engine's cluster."""
        self._set_sandbox(run_id, idx, {"node": node})

    def set_command_running(self, run_id: str, idx: int) -> None:
        """A sandbox's command has started."""
        self._set_sandbox(run_id, idx, {"status": "running"})

    def set_ended(self, run_id: str, idx: int, outcome: Outcome) -> None:
        """A sandbox has ended."""
        self._set_sandbox(run_id, idx, _ended(outcome))

    def end_queued(self, run_id: str, outcome: Outcome) -> None:
        """End every queued sandbox of the run (they never start)."""
        fields = _ended(outcome)
        self.store.end_sandboxes(run_id, "queued", fields)
        self.changes += 1
        if (view := self._views.get(run_id)) is not None:
            view._end_sandboxes("queued", fields)

    def fail_interrupted(self, reason: str) -> None:
        """Fail every sandbox that was booting or running when the server stopped (at start,
        before any view is loaded)."""
        self.store.fail_interrupted(reason)

    def _set_run(self, run_id: str, fields: Mapping[str, Any]) -> None:
        self.store.update_run(run_id, fields)
        self.changes += 1
        if (view := self._views.get(run_id)) is not None:
            view._set_run(fields)

    def _set_sandbox(self, run_id: str, idx: int, fields: Mapping[str, Any]) -> None:
        self.store.update_sandbox(run_id, idx, fields)
        self.changes += 1
        if (view := self._views.get(run_id)) is not None:
            view._set_sandbox(idx, fields)


def _ended(outcome: Outcome) -> dict[str, Any]:
    return {**asdict(outcome), "ended_at": time.time()}
