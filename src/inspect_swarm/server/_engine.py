"""The swarm engine: starts runs, schedules their sandboxes by memory, and holds the lease.

One event loop owns all state: a start checks and records a run without awaiting, so racing
identical starts create exactly one run. Sandboxes start first in, first out across runs, as
long as the run's concurrency and the server's memory allow; each runs in its own task.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import secrets
import shlex
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
from anyio.abc import TaskGroup

from ._cgroups import Limits
from ._isolation import Sandbox, SandboxError, SandboxHost
from ._keys import ROOT, Owner, child_lineage, new_key
from ._limits import check_command_line
from ._process import ChildProcess
from ._schema import (
    RESULT_BYTES,
    TAIL_BYTES,
    ApiError,
    SandboxFields,
    Size,
    StartBody,
    body_hash,
    invalid,
    refusing_bad_input,
)
from ._store import Lease, Store
from ._views import RunView, Views, iso

GIB = 1024**3
_RELEASE_REASONS = {"closed": "closed: the account's key was removed from the server"}
"""What a lease's `releaseReason` means, where the reason alone does not say it."""
RECORDS_KEPT_SECONDS = 7 * 24 * 3600
_DRAIN_SECONDS = 0.5
_TICK_SECONDS = 1.0
_CHECKPOINT_SECONDS = 1.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """Limits and timings of one server."""

    memory_gib: int
    max_sandboxes: int = 5000
    min_timeout: int = 10
    max_timeout: int = 21600
    default_timeout: int = 600
    idle_release: float = 600.0
    stuck_timeout: float = 900.0
    plan: Literal["scale", "none"] = "scale"


@dataclass
class _Run:
    """What the scheduler keeps in memory about an unfinished run."""

    id: str
    lineage: str
    """The lineage the run was made under (its sandboxes' keys reach below it)."""
    lease_id: str
    count: int
    concurrency: int
    memory_gb: int
    vcpus: int
    spec: dict[str, Any]
    queue: deque[int]
    active: dict[int, anyio.CancelScope] = field(default_factory=dict)
    last_start: float = field(default_factory=time.monotonic)
    waiting_reason: str | None = None
    started: bool = False
    """Whether the run's status has been set to running."""
    ending: tuple[str, str] = ("cancelled", "cancelled")
    """The status and reason of sandboxes stopped by `_end_run`."""


@dataclass
class _Slot:
    """The sandbox a sandbox task holds between the sandboxes of a run it runs in turn."""

    sandbox: Sandbox | None = None


def sandbox_argv(command: str | list[str], args: list[str]) -> list[str]:
    """The command line of one sandbox: a shell string with `args` quoted on, or an argv."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", " ".join([command, *map(shlex.quote, args)])]
    return [*command, *args]


class LeaseHolder(Protocol):
    """Sandboxes kept outside runs (the E2B surface's) that live and end with a lease."""

    def holds(self, lease_id: str) -> bool:
        """Whether a sandbox on the lease is alive (the lease is not idle)."""
        ...

    def release(self, lease_id: str, reason: str) -> None:
        """End every sandbox on the lease."""
        ...


class Engine:
    """Runs, sandboxes and the lease of one swarm server."""

    def __init__(self, store: Store, host: SandboxHost, settings: Settings) -> None:
        self.store = store
        self.host = host
        self.settings = settings
        self.url = ""
        self.max_running = 0
        self._runs: dict[str, _Run] = {}
        self._booked_gb = 0
        self._running = 0
        self._wakeup = anyio.Event()
        self._tg: TaskGroup | None = None
        self._idle_since: float | None = None
        self.holders: list[LeaseHolder] = []
        self._lease_keys: dict[str, str] = {}
        """Each open lease's key as its account is shown it (the store keeps only hashes)."""
        self.views = Views(store, host.describe())
        self.stopped: str | None = None
        """Why the scheduler stopped, if it did (the server then starts nothing)."""
        self._recover()

    # recovery

    def _recover(self) -> None:
        self.store.fail_interrupted("server restarted while the sandbox was running")
        self.store.end_long_lived("server restarted while the sandbox was alive")
        self.store.revoke_sandbox_keys()
        self.host.reap_leftovers()
        self.store.purge(time.time() - RECORDS_KEPT_SECONDS)
        for row in self.store.unfinished_runs():
            spec = json.loads(row["spec"])
            queued = [r["idx"] for r in self.store.sandboxes(row["id"], "queued")]
            size = spec["size"]
            self._runs[row["id"]] = _Run(
                row["id"],
                row["lineage"],
                row["lease_id"],
                row["count"],
                row["concurrency"],
                size["memoryGb"],
                size["vcpus"],
                spec,
                deque(queued),
            )
            self._maybe_complete(row["id"])

    # starting

    def start(
        self, owner: Owner, raw: dict[str, Any], body: StartBody, key: str | None
    ) -> tuple[RunView, bool]:
        """Start a run for `owner` (made under its lineage); (run, False) when the idempotency
        key already started it."""
        key = key or body.idempotencyKey
        digest = body_hash(raw)
        if key is not None and (seen := self.store.idempotent(owner.namespace, key)) is not None:
            if seen["body_hash"] != digest:
                raise ApiError(
                    409,
                    "idempotency_conflict",
                    f"Idempotency-Key {key!r} was used with a different body; "
                    "use a new key for a new run",
                )
            view = self.views.get(seen["run_id"])
            assert view is not None
            return view, False
        self._check_start(body)
        inputs = _inputs(body)
        self._check_command_lines(body, inputs)
        lease, _ = self.lease(owner.account)
        concurrency = body.concurrency or self._max_concurrency(body.size)
        run_id = uuid.uuid4().hex
        spec = {
            "command": body.command,
            "size": body.size.wire(),
            "timeoutSeconds": body.timeoutSeconds or self.settings.default_timeout,
            "template": body.template or "base",
            "resultPath": body.resultPath,
        }
        run = {
            "id": run_id,
            "account": owner.account,
            "lineage": owner.lineage,
            "lease_id": lease.id,
            "name": body.name,
            "spec": spec,
            "concurrency": concurrency,
            "created_at": time.time(),
        }
        sandbox_ids = [_sandbox_id() for _ in inputs]
        self.store.insert_run(
            run, inputs, sandbox_ids, None if key is None else (owner.namespace, key, digest)
        )
        self._runs[run_id] = _Run(
            run_id,
            owner.lineage,
            lease.id,
            len(inputs),
            concurrency,
            body.size.memoryGb,
            body.size.vcpus,
            spec,
            deque(range(len(inputs))),
        )
        self._idle_since = None
        self._wake()
        logger.info(
            "run %s started by %s: %d sandboxes of %s vCPU, %s GB",
            run_id,
            owner.label,
            len(inputs),
            body.size.vcpus,
            body.size.memoryGb,
        )
        view = self.views.get(run_id)
        assert view is not None
        return view, True

    def _max_concurrency(self, size: Size) -> int:
        return self.settings.memory_gib // size.memoryGb

    def _check_start(self, body: StartBody) -> None:
        s = self.settings
        if s.plan == "none":
            raise ApiError(402, "plan_required", "this server does not offer Swarms (plan none)")
        count = body.count if body.count is not None else len(body.inputs or [])
        if count > s.max_sandboxes:
            raise ApiError(
                403,
                "swarm_too_large",
                f"count: {count} sandboxes is over this server's limit of "
                f"{s.max_sandboxes} per run; split the job",
                field="count",
            )
        self.check_sandbox(body)
        most = self._max_concurrency(body.size)
        if body.concurrency is not None and body.concurrency > most:
            raise invalid(
                "concurrency",
                f"at most {most} sandboxes of {body.size.memoryGb} GB "
                f"fit in {s.memory_gib} GiB, got {body.concurrency}",
            )

    @staticmethod
    def _check_command_lines(body: StartBody, inputs: list[dict[str, Any]]) -> None:
        """Refuse a sandbox's command line that the kernel would refuse (400 naming it)."""
        with refusing_bad_input():
            for i, item in enumerate(inputs):
                argv = sandbox_argv(body.command, item["args"])
                field = "command" if body.inputs is None else f"inputs.{i}"
                check_command_line(field, argv, item["env"])

    def check_serving(self) -> None:
        """Refuse to start anything (503) once the scheduler has stopped."""
        if self.stopped is not None:
            raise ApiError(
                503,
                "engine_stopped",
                f"this server's scheduler stopped ({self.stopped}) and starts nothing; "
                "restart the server",
            )

    def check_sandbox(self, body: SandboxFields) -> None:
        """Refuse a timeout or size this server cannot honour (400 naming the field)."""
        s = self.settings
        timeout = body.timeoutSeconds
        if timeout is not None and not s.min_timeout <= timeout <= s.max_timeout:
            raise invalid(
                "timeoutSeconds",
                f"must be {s.min_timeout} to {s.max_timeout} seconds, got {timeout}",
            )
        if body.size.memoryGb > s.memory_gib:
            raise invalid(
                "size.memoryGb",
                f"{body.size.memoryGb} GB does not fit in this "
                f"server's {s.memory_gib} GiB; ask for less memory",
            )

    # cancelling

    def cancel(self, run_id: str) -> None:
        """Cancel a run: queued never start, running stop, finished keep their results."""
        self._end_run(run_id, "cancelled", "cancelled")

    def _end_run(self, run_id: str, status: str, reason: str) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        run.queue.clear()
        run.ending = (status, reason)
        ended = {"status": status, "error": reason, "ended_at": time.time()}
        self.store.end_sandboxes(run_id, "queued", ended)
        self.views.end_sandboxes(run_id, "queued", ended)
        for scope in run.active.values():
            scope.cancel()
        self._maybe_complete(run_id)
        self._wake()

    # leases

    def lease(self, account: str) -> tuple[Lease, bool]:
        """The account's open lease, made if the server is free; (lease, created)."""
        self.check_serving()
        current = self.store.open_lease()
        if current is not None and current.account != account:
            raise ApiError(
                409,
                "server_busy",
                "another account rents this swarm server; try again in a few minutes",
            )
        if current is not None:
            return current, False
        if self.settings.plan == "none":
            raise ApiError(402, "plan_required", "this server does not offer Swarms (plan none)")
        lease = Lease(f"lease-{uuid.uuid4().hex[:12]}", account, time.time(), None, None)
        self.store.insert_lease(lease)
        self._idle_since = time.monotonic()
        return lease, True

    def lease_key(self, lease: Lease) -> str:
        """The open lease's key: it acts for the account while the lease is open.

        Made on first asking, and again by a restarted server (which kept only the hashes of
        the keys it gave before: those keep working too).
        """
        key = self._lease_keys.get(lease.id)
        if key is None:
            key = self._lease_keys[lease.id] = new_key()
            self.store.insert_key(key, lease.account, lease.id, None, ROOT)
        return key

    def sandbox_key(self, lease: Lease, sandbox_id: str, lineage: str) -> str:
        """A new key of the sandbox `sandbox_id`, made under `lineage`: it reaches only what
        the sandbox makes, until `revoke_sandbox_key`."""
        key = new_key()
        self.store.insert_key(
            key, lease.account, lease.id, sandbox_id, child_lineage(lineage, sandbox_id)
        )
        return key

    def revoke_sandbox_key(self, sandbox_id: str) -> None:
        """The sandbox has ended: its key stops working."""
        self.store.revoke_sandbox_keys(sandbox_id)

    def close_accounts(self, accounts: frozenset[str]) -> None:
        """End the lease of an account not in `accounts` (its key was removed from the
        server): every key made for it stops working, and its runs and sandboxes end."""
        lease = self.store.open_lease()
        if lease is not None and lease.account not in accounts:
            self.release(lease, "closed")

    def release(self, lease: Lease, reason: str) -> None:
        """End a lease, every key made for it and every sandbox on it."""
        self.store.release_lease(lease.id, reason)
        self.store.revoke_lease_keys(lease.id)
        self._lease_keys.pop(lease.id, None)
        # the run's `error`, as billing's on a hosted server: its queued sandboxes fail with
        # it, and its running ones stop too, since releasing ends every sandbox on the server
        why = _RELEASE_REASONS.get(reason, reason)
        error = f"the server's lease ended ({why}): every sandbox on it was ended"
        for run in [r for r in self._runs.values() if r.lease_id == lease.id]:
            self._set_run(run.id, error=error)
            self._end_run(run.id, "failed", error)
        for holder in self.holders:
            holder.release(lease.id, f"lease {reason}")

    def book(self, memory_gb: int) -> None:
        """Book memory for a sandbox outside a run, or refuse with 429 when it is full."""
        total = self.settings.memory_gib
        if self._booked_gb + memory_gb > total:
            raise ApiError(
                429,
                "memory_full",
                f"swarm server memory full: {self._booked_gb}/{total} GiB booked; "
                "end a sandbox or wait for running ones to finish",
            )
        self._booked_gb += memory_gb
        self._running += 1
        self.max_running = max(self.max_running, self._running)
        self._idle_since = None

    def unbook(self, memory_gb: int) -> None:
        """Return what `book` took."""
        self._booked_gb -= memory_gb
        self._running -= 1
        self._wake()

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task beside the scheduler, ended with the server (an error ends it alone)."""
        assert self._tg is not None, "the engine is not serving"
        self._tg.start_soon(_supervised, func, *args)

    def lease_env(self, lease: Lease, key: str) -> dict[str, str]:
        """The variables a sandbox on the lease gets, with its own `key`."""
        domain = self.url.split("://", 1)[-1]
        return {
            "MARITIME_API_KEY": key,
            "E2B_API_KEY": key,
            "MARITIME_API_URL": self.url,
            "E2B_DOMAIN": domain,
            "E2B_API_URL": self.url,
            "E2B_SANDBOX_URL": self.url,
            "MARITIME_SERVER_LEASE_ID": lease.id,
        }

    def lease_object(self, lease: Lease, key: str | None) -> dict[str, Any]:
        """A lease as the API shows it, with `key` and the variables that carry it (given only
        to the lease's own account)."""
        is_open = lease.released_at is None
        obj: dict[str, Any] = {
            "id": lease.id,
            "server": "local",
            "memoryGib": self.settings.memory_gib,
            "memoryUsedGib": self._booked_gb if is_open else 0,
            "sandboxes": self._running if is_open else 0,
            "pricePerMinuteUsd": 0.0,
            "startedAt": iso(lease.started_at),
            "releasedAt": iso(lease.released_at),
            "releaseReason": lease.release_reason,
        }
        if key is not None and is_open:
            obj["apiKey"] = key
            obj["env"] = self.lease_env(lease, key)
        return obj

    # the scheduler

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the scheduler until cancelled (sandboxes run as children of this task).

        An error in one task ends that task alone. One in the scheduler itself stops it and
        returns: `stopped` says why, and nothing is started any more.
        """
        # a full collection walks everything imported at startup (~200k objects), stalling
        # requests for ~0.1 s: what exists by now lives as long as the server, so skip it
        gc.freeze()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self.start_soon(self._checkpoints)
                task_status.started()
                await self._schedule()
        except Exception as ex:
            logger.exception("the scheduler stopped")
            while isinstance(ex, ExceptionGroup) and len(ex.exceptions) == 1:
                ex = ex.exceptions[0]  # the task group's wrapping of the one error
            self.stopped = f"{type(ex).__name__}: {ex}"

    async def _schedule(self) -> None:
        while True:
            self._dispatch()
            self._check_stuck()
            self._check_idle()
            with anyio.move_on_after(_TICK_SECONDS):
                await self._wakeup.wait()
            self._wakeup = anyio.Event()

    def _wake(self) -> None:
        self._wakeup.set()

    async def _checkpoints(self) -> None:
        # the store's checkpoints fsync: never on the event loop
        while True:
            await anyio.sleep(_CHECKPOINT_SECONDS)
            await anyio.to_thread.run_sync(self.store.checkpoint)

    def _dispatch(self) -> None:
        assert self._tg is not None
        total = self.settings.memory_gib
        blocked: str | None = None
        for run in list(self._runs.values()):
            reason = blocked
            while blocked is None and run.queue and len(run.active) < run.concurrency:
                if self._booked_gb + run.memory_gb > total:
                    blocked = reason = (
                        f"swarm server memory full: {self._booked_gb}/{total} GiB booked"
                    )
                    break
                self._launch(run, run.queue.popleft())
            self._set_waiting(run, reason if run.queue else None)

    def _set_waiting(self, run: _Run, reason: str | None) -> None:
        if reason != run.waiting_reason:
            run.waiting_reason = reason
            self._set_run(run.id, waiting_reason=reason)

    def _launch(self, run: _Run, idx: int) -> None:
        assert self._tg is not None
        self._booked_gb += run.memory_gb
        self._running += 1
        self.max_running = max(self.max_running, self._running)
        self.start_soon(self._sandbox_task, run, idx, self._begin(run, idx))

    def _begin(self, run: _Run, idx: int) -> anyio.CancelScope:
        scope = anyio.CancelScope()
        run.active[idx] = scope
        run.last_start = time.monotonic()
        self._set_sandbox(run.id, idx, status="booting", started_at=time.time())
        if not run.started:
            run.started = True
            self._set_run(run.id, status="running")
        return scope

    def _check_stuck(self) -> None:
        limit = self.settings.stuck_timeout
        for run in list(self._runs.values()):
            if run.queue and not run.active and time.monotonic() - run.last_start > limit:
                reason = run.waiting_reason or "no sandbox could start"
                self._end_run(run.id, "failed", f"could not start for {limit:g}s: {reason}")

    def _check_idle(self) -> None:
        lease = self.store.open_lease()
        if lease is None:
            return
        held = any(holder.holds(lease.id) for holder in self.holders)
        if held or any(r.lease_id == lease.id for r in self._runs.values()):
            self._idle_since = None
            return
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= self.settings.idle_release:
            self.release(lease, "idle")

    def _set_run(self, run_id: str, **fields: Any) -> None:
        self.store.update_run(run_id, **fields)
        self.views.set_run(run_id, fields)

    def _set_sandbox(self, run_id: str, idx: int, **fields: Any) -> None:
        self.store.update_sandbox(run_id, idx, **fields)
        self.views.set_sandbox(run_id, idx, fields)

    def _maybe_complete(self, run_id: str) -> None:
        run = self._runs.get(run_id)
        if run is None or run.queue or run.active:
            return
        del self._runs[run_id]
        self._set_run(run_id, status="completed", waiting_reason=None, ended_at=time.time())
        if logger.isEnabledFor(logging.INFO):
            counts = self.store.counts(run_id)
            ended = ", ".join(f"{counts[s]} {s}" for s in ("succeeded", "failed", "cancelled"))
            logger.info("run %s completed: %s", run_id, ended)

    # one sandbox

    async def _sandbox_task(self, run: _Run, idx: int, scope: anyio.CancelScope) -> None:
        """Run the sandbox `idx` of `run`, then the run's next queued ones in turn, each in
        the last one's sandbox made anew where it can be (on the memory booked for the first)."""
        slot = _Slot()
        try:
            while True:
                await self._one(run, idx, scope, slot)
                if not run.queue:
                    return
                idx = run.queue.popleft()
                scope = self._begin(run, idx)
        finally:
            try:
                if slot.sandbox is not None:
                    await slot.sandbox.close()
            finally:
                self._booked_gb -= run.memory_gb
                self._running -= 1
                self._wake()

    async def _one(self, run: _Run, idx: int, scope: anyio.CancelScope, slot: _Slot) -> None:
        # the output so far is the sandbox's even when it is stopped midway
        tails = _Tails()
        outcome: dict[str, Any] = {"status": "failed", "error": "server stopped"}
        try:
            with scope:
                outcome = await self._execute(run, idx, slot, tails)
            if scope.cancelled_caught:
                status, reason = run.ending
                outcome = {"status": status, "error": reason}
        except Exception as ex:
            # this sandbox's failure, and nothing else's
            logger.exception("sandbox %s of run %s failed", idx, run.id)
            outcome = {"status": "failed", "error": f"internal error: {type(ex).__name__}: {ex}"}
        finally:
            outcome = {**tails.fields(), **outcome}
            outcome.setdefault("ended_at", time.time())
            self._set_sandbox(run.id, idx, **outcome)
            del run.active[idx]
            self._maybe_complete(run.id)

    async def _execute(self, run: _Run, idx: int, slot: _Slot, tails: _Tails) -> dict[str, Any]:
        row = self.store.sandbox_at(run.id, idx)
        try:
            sandbox = await self._sandbox_for(run, row["sandbox_id"], slot)
        except (SandboxError, OSError) as ex:
            return {"status": "failed", "error": f"boot failed: {ex}"}
        keep = False
        try:
            outcome = await self._command(run, idx, sandbox, json.loads(row["input"]), tails)
            keep = bool(run.queue) and sandbox.reusable
            return outcome
        finally:
            self.revoke_sandbox_key(row["sandbox_id"])
            # what the sandbox ran is over before its end is recorded, unless it is kept
            if not keep:
                slot.sandbox = None
                await sandbox.close()

    async def _sandbox_for(self, run: _Run, sandbox_id: str, slot: _Slot) -> Sandbox:
        """The slot's sandbox made anew as `sandbox_id`, or a new one (kept in the slot)."""
        if slot.sandbox is not None:
            kept, slot.sandbox = slot.sandbox, None
            try:
                await kept.reset(sandbox_id)
                slot.sandbox = kept
                return kept
            except (SandboxError, OSError):
                pass  # a new one, then
            finally:
                if slot.sandbox is None:
                    await kept.close()
        size = run.spec["size"]
        limits = Limits(size["memoryGb"] * GIB, size["vcpus"])
        slot.sandbox = await self.host.create(sandbox_id, limits)
        return slot.sandbox

    async def _command(
        self, run: _Run, idx: int, sandbox: Sandbox, item: dict[str, Any], tails: _Tails
    ) -> dict[str, Any]:
        spec = run.spec
        for path, content in item["files"].items():
            try:
                sandbox.write_file(path, content.encode())
            except OSError as ex:
                return {"status": "failed", "error": f"boot failed: cannot write {path}: {ex}"}
        self._set_sandbox(run.id, idx, status="running")
        lease = self.store.lease(run.lease_id)
        assert lease is not None
        env = {
            **self.lease_env(lease, self.sandbox_key(lease, sandbox.id, run.lineage)),
            "MARITIME_SWARM_INDEX": str(idx),
            "MARITIME_SWARM_COUNT": str(run.count),
            "MARITIME_SWARM_ID": run.id,
            **item["env"],
        }
        try:
            process = await sandbox.exec(sandbox_argv(spec["command"], item["args"]), env)
        except SandboxError as ex:
            return {"status": "failed", "error": str(ex)}
        tails.began = True
        timeout = spec["timeoutSeconds"]
        with anyio.move_on_after(timeout) as deadline:
            code = await _follow(process, tails.streams)
        outcome = tails.fields()
        if deadline.cancelled_caught:
            return {**outcome, "status": "failed", "error": f"timeout after {timeout}s"}
        outcome["exit_code"] = code if code >= 0 else 128 - code
        if sandbox.oom_killed():
            return {**outcome, "status": "failed", "error": f"out of memory ({size_gb(spec)} GiB)"}
        if code != 0:
            why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            return {**outcome, "status": "failed", "error": why}
        return {**outcome, **_read_result(sandbox, spec["resultPath"])}


async def _supervised(func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
    """Run a task of the engine's group, ending it alone (logged) on an error."""
    try:
        await func(*args)
    except Exception:
        logger.exception("a task of the swarm engine failed: %s", getattr(func, "__name__", func))


def size_gb(spec: dict[str, Any]) -> int:
    """The memory of one sandbox of the run, in GB."""
    return int(spec["size"]["memoryGb"])


@dataclass
class _Tails:
    """The last bytes a sandbox's command wrote to stdout and stderr, so far."""

    streams: dict[str, bytearray] = field(
        default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()}
    )
    began: bool = False
    """Whether the command started (a sandbox stopped before has no tails)."""

    def fields(self) -> dict[str, Any]:
        """The sandbox row's tails."""
        if not self.began:
            return {}
        return {
            f"{name}_tail": tail.decode(errors="replace") for name, tail in self.streams.items()
        }


async def _follow(process: ChildProcess, tails: dict[str, bytearray]) -> int:
    """Keep the last bytes of stdout and stderr until the process exits; its exit status."""

    drained = [anyio.Event(), anyio.Event()]

    async def collect(stream: str, done: anyio.Event) -> None:
        tail = tails[stream]
        async for chunk in process.chunks(stream):
            tail += chunk
            del tail[:-TAIL_BYTES]
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect, "stdout", drained[0])
        tg.start_soon(collect, "stderr", drained[1])
        code = await process.wait()
        # output still in the pipes comes within moments; children holding them open do not
        with anyio.move_on_after(_DRAIN_SECONDS):
            for done in drained:
                await done.wait()
        tg.cancel_scope.cancel()
    return code


def _read_result(sandbox: Sandbox, path: str | None) -> dict[str, Any]:
    outcome: dict[str, Any] = {"status": "succeeded", "error": None}
    if path is None:
        return outcome
    try:
        data = sandbox.read_file(path, RESULT_BYTES)
    except FileNotFoundError:
        return {**outcome, "error": f"resultPath {path} was not written"}
    except OSError as ex:
        return {**outcome, "error": f"resultPath {path}: {ex}"}
    if len(data) > RESULT_BYTES:
        return {"status": "failed", "error": f"result at {path} is over the 64 KB limit"}
    try:
        return {**outcome, "result": data.decode()}
    except UnicodeDecodeError:
        return {**outcome, "result": base64.b64encode(data).decode(), "result_encoding": "base64"}


def _inputs(body: StartBody) -> list[dict[str, Any]]:
    items = body.inputs if body.inputs is not None else [None] * (body.count or 0)
    return [
        {
            "args": item.args if item else [],
            "env": {**body.env, **(item.env if item else {})},
            "files": {**body.files, **(item.files if item else {})},
        }
        for item in items
    ]


def _sandbox_id() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "sbx-" + "".join(secrets.choice(alphabet) for _ in range(10))
