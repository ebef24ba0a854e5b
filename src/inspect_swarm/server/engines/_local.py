"""The engine that runs sandboxes on this machine: it schedules runs' sandboxes by memory, runs
each one's command in an isolated sandbox (`sandboxes._isolation`), and records what happened.

One event loop owns all state: a run is submitted without awaiting, so what the domain checked
still holds when it starts. Sandboxes start first in, first out across runs, as long as the
run's concurrency and the server's memory allow; each runs in its own task, which runs the
run's next queued sandboxes in turn, in its sandbox made anew where it can be.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from ..model._types import (
    EndStatus,
    MemoryFull,
    Outcome,
    RunRecord,
    SandboxInput,
    Settings,
    Size,
)
from ..records._runs import Runs
from ..sandboxes._isolation import Sandbox, SandboxError, SandboxHost
from ._command import Slot, Tails, command_env, limits, run_command
from ._engine import LiveSandbox, SandboxCredentials

_TICK_SECONDS = 1.0
_LAUNCHES_PER_PASS = 16
"""The most sandboxes one pass of the scheduler starts: between the passes of a burst of
starts, the event loop answers requests (200 at once held it 6 ms)."""

logger = logging.getLogger(__name__)


@dataclass
class EngineRun:
    """What the scheduler keeps in memory about an unfinished run."""

    record: RunRecord
    queue: deque[int]
    active: dict[int, anyio.CancelScope] = field(default_factory=dict)
    last_start: float = field(default_factory=time.monotonic)
    waiting_reason: str | None = None
    started: bool = False
    """Whether the run's status has been set to running."""
    ending: tuple[EndStatus, str] = ("cancelled", "cancelled")
    """The status and reason of sandboxes stopped by `_end_run`."""

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def size(self) -> Size:
        return self.record.spec.size


class LocalEngine:
    """Runs the sandboxes of one server on this machine (an `Engine`)."""

    def __init__(
        self, runs: Runs, host: SandboxHost, settings: Settings, credentials: SandboxCredentials
    ) -> None:
        self.runs = runs
        self.host = host
        self.settings = settings
        self.credentials = credentials
        self._max_running = 0
        self._runs: dict[str, EngineRun] = {}
        self._booked_gb = 0
        self._running = 0
        self._wakeup = anyio.Event()
        self._tg: TaskGroup | None = None
        host.reap_leftovers()

    @property
    def max_running(self) -> int:
        """The most sandboxes that have run at once."""
        return self._max_running

    @property
    def booked_gb(self) -> int:
        """The memory booked by the sandboxes running now, in GB."""
        return self._booked_gb

    @property
    def running(self) -> int:
        """How many sandboxes run now."""
        return self._running

    # runs

    def submit(self, run: RunRecord, queued: list[int]) -> None:
        """Run the sandboxes of `run` at these input indexes (a run with none left completes)."""
        self._runs[run.id] = EngineRun(run, deque(queued))
        self._maybe_complete(run.id)
        self._wake()

    def cancel(self, run_id: str) -> None:
        """Cancel a run: queued never start, running stop, finished keep their results."""
        self._end_run(run_id, "cancelled", "cancelled")

    def holds(self, lease_id: str) -> bool:
        """Whether a run on the lease is unfinished."""
        return any(run.record.lease_id == lease_id for run in self._runs.values())

    def end_lease(self, lease_id: str, error: str) -> None:
        """Fail every unfinished run on the lease with `error`, its running sandboxes too."""
        for run in [r for r in self._runs.values() if r.record.lease_id == lease_id]:
            self.runs.set_error(run.id, error)
            self._end_run(run.id, "failed", error)

    def _end_run(self, run_id: str, status: EndStatus, reason: str) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        run.queue.clear()
        run.ending = (status, reason)
        self.runs.end_queued(run_id, Outcome(status, reason))
        for scope in run.active.values():
            scope.cancel()
        self._maybe_complete(run_id)
        self._wake()

    # sandboxes outside runs

    def book(self, size: Size) -> None:
        """Book memory for a sandbox outside a run, or refuse with MemoryFull."""
        total = self.settings.memory_gib
        if self._booked_gb + size.memory_gb > total:
            raise MemoryFull(
                f"swarm server memory full: {self._booked_gb}/{total} GiB booked; "
                "end a sandbox or wait for running ones to finish"
            )
        self._take(size)

    def unbook(self, size: Size) -> None:
        """Give back what `book` took."""
        self._give_back(size)

    def _take(self, size: Size) -> None:
        self._booked_gb += size.memory_gb
        self._running += 1
        self._max_running = max(self._max_running, self._running)

    def _give_back(self, size: Size) -> None:
        self._booked_gb -= size.memory_gb
        self._running -= 1
        self._wake()

    async def create_sandbox(self, sandbox_id: str, size: Size) -> LiveSandbox:
        """Boot a sandbox outside a run."""
        return await self.host.create(sandbox_id, limits(size))

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task beside the scheduler, ended with the server (an error ends it alone)."""
        assert self._tg is not None, "the engine is not serving"
        self._tg.start_soon(_supervised, func, *args)

    async def aclose(self) -> None:
        """End every sandbox, and remove the server's cgroups."""
        await self.host.aclose()
        self.host.cgroups.remove_base()

    # the scheduler

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the scheduler until cancelled (sandboxes run as children of this task).

        An error in one sandbox's task ends that task alone; one in the scheduler itself is
        raised, ending every sandbox.
        """
        # a full collection walks everything imported at startup (~200k objects), stalling
        # requests for ~0.1 s: what exists by now lives as long as the server, so skip it
        gc.freeze()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await self._schedule()

    async def _schedule(self) -> None:
        while True:
            self._dispatch()
            self._check_stuck()
            with anyio.move_on_after(_TICK_SECONDS):
                await self._wakeup.wait()
            self._wakeup = anyio.Event()
            # trio runs a batch of ready tasks in either order: one more turn lets every
            # request that was ready at the wake-up run before the next pass
            await anyio.lowlevel.checkpoint()

    def _wake(self) -> None:
        self._wakeup.set()

    def _dispatch(self) -> None:
        total = self.settings.memory_gib
        blocked: str | None = None
        launches = _LAUNCHES_PER_PASS
        for run in list(self._runs.values()):
            reason = blocked
            while blocked is None and run.queue and len(run.active) < run.record.concurrency:
                if self._booked_gb + run.size.memory_gb > total:
                    blocked = reason = (
                        f"swarm server memory full: {self._booked_gb}/{total} GiB booked"
                    )
                    break
                if not launches:
                    self._wake()  # the next pass starts more, once requests have had a turn
                    break
                self._launch(run, run.queue.popleft())
                launches -= 1
            self._set_waiting(run, reason if run.queue else None)

    def _set_waiting(self, run: EngineRun, reason: str | None) -> None:
        if reason != run.waiting_reason:
            run.waiting_reason = reason
            self.runs.set_waiting(run.id, reason)

    def _launch(self, run: EngineRun, idx: int) -> None:
        self._take(run.size)
        self.start_soon(self._sandbox_task, run, idx, self._begin(run, idx))

    def _begin(self, run: EngineRun, idx: int, node: str | None = None) -> anyio.CancelScope:
        scope = anyio.CancelScope()
        run.active[idx] = scope
        run.last_start = time.monotonic()
        self.runs.set_booting(run.id, idx, node)
        if not run.started:
            run.started = True
            self.runs.set_running(run.id)
        return scope

    def _check_stuck(self) -> None:
        limit = self.settings.stuck_timeout
        for run in list(self._runs.values()):
            if run.queue and not run.active and time.monotonic() - run.last_start > limit:
                reason = run.waiting_reason or "no sandbox could start"
                self._end_run(run.id, "failed", f"could not start for {limit:g}s: {reason}")

    def _maybe_complete(self, run_id: str) -> None:
        run = self._runs.get(run_id)
        if run is None or run.queue or run.active:
            return
        del self._runs[run_id]
        self.runs.set_completed(run_id)

    # one sandbox

    async def _sandbox_task(self, run: EngineRun, idx: int, scope: anyio.CancelScope) -> None:
        """Run the sandbox `idx` of `run`, then the run's next queued ones in turn, each in
        the last one's sandbox made anew where it can be (on the memory booked for the first)."""
        slot = self._new_slot()
        try:
            while True:
                await self._one(run, idx, scope, slot)
                if not run.queue:
                    return
                idx = run.queue.popleft()
                scope = self._begin(run, idx, slot.node)
        finally:
            try:
                await self._end_slot(slot)
            finally:
                self._give_back(run.size)

    def _new_slot(self) -> Slot:
        return Slot()

    async def _end_slot(self, slot: Slot) -> None:
        """End what the slot holds (its sandbox kept for the run's next)."""
        await slot.close()

    async def _one(self, run: EngineRun, idx: int, scope: anyio.CancelScope, slot: Slot) -> None:
        # the output so far is the sandbox's even when it is stopped midway
        tails = Tails()
        outcome = Outcome("failed", "server stopped")
        try:
            with scope:
                outcome = await self._execute(run, idx, slot, tails)
            if scope.cancelled_caught:
                outcome = Outcome(*run.ending)
        except Exception as ex:
            # this sandbox's failure, and nothing else's
            logger.exception("sandbox %s of run %s failed", idx, run.id)
            outcome = Outcome("failed", f"internal error: {type(ex).__name__}: {ex}")
        finally:
            self.runs.set_ended(run.id, idx, tails.onto(outcome))
            del run.active[idx]
            self._maybe_complete(run.id)

    async def _execute(self, run: EngineRun, idx: int, slot: Slot, tails: Tails) -> Outcome:
        sandbox_id, item = self.runs.input(run.id, idx)
        try:
            sandbox = await slot.sandbox_for(
                lambda new: self.host.create(new, limits(run.size)), sandbox_id
            )
        except (SandboxError, OSError) as ex:
            return Outcome("failed", f"boot failed: {ex}")
        keep = False
        try:
            outcome = await self._command(run, idx, sandbox, item, tails)
            keep = bool(run.queue)
            return outcome
        finally:
            self.credentials.revoke(sandbox_id)
            # what the sandbox ran is over before its end is recorded, unless it is kept
            await slot.done(keep)

    async def _command(
        self, run: EngineRun, idx: int, sandbox: Sandbox, item: SandboxInput, tails: Tails
    ) -> Outcome:
        record = run.record
        credentials = self.credentials.sandbox_env(record.lease_id, sandbox.id, record.lineage)
        env = command_env(record, idx, item, credentials)
        started = lambda: self.runs.set_command_running(run.id, idx)  # noqa: E731
        return await run_command(sandbox, record.spec, item, env, started, tails)


async def _supervised(func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
    """Run a task of the engine's group, ending it alone (logged) on an error."""
    try:
        await func(*args)
    except Exception:
        logger.exception("a task of the swarm engine failed: %s", getattr(func, "__name__", func))
