"""The scheduler every engine shares: it keeps the runs' queues, starts their sandboxes first in,
first out across runs as each run's concurrency and the server's memory allow, and records what
happened. Where and how a sandbox runs is its slot runner's (`SlotRunner`): this machine's
(`engines._local`) or a Ray cluster's (`engines.ray`).

One event loop owns all state: a run is submitted without awaiting, so what the domain checked
still holds when it starts. Each sandbox started takes a slot (room for one sandbox of the
run's size) in a task of its own, which runs the run's next queued sandboxes in turn in that
slot, then ends it. A run of a size that none of the runner's machines can hold is not started:
it waits saying why, holding up no run behind it, until it can start or the stuck timeout
fails it.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel

from ..model._types import (
    EndStatus,
    MemoryFull,
    Outcome,
    RunRecord,
    Settings,
    Size,
)
from ..records._runs import Runs
from ..sandboxes._network import Outbound
from ._command import Command, Tails, command_env
from ._engine import LiveSandbox, Origin, SandboxCredentials

_TICK_SECONDS = 1.0
_LAUNCHES_PER_PASS = 16
"""The most sandboxes one pass of the scheduler starts: between the passes of a burst of
starts, the event loop answers requests (200 at once held it 6 ms)."""

logger = logging.getLogger(__name__)


class PlacedSlot(Protocol):
    """What the scheduler reads of a runner's slot."""

    @property
    def node(self) -> str | None:
        """The node of the runner's cluster the slot's room is on (None on one machine, or
        before it is placed)."""
        ...


S = TypeVar("S", bound=PlacedSlot)


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


@dataclass(frozen=True)
class Turn:
    """One sandbox of a run, as the scheduler hands it to a slot: its command, and what to
    tell the scheduler on the way."""

    sandbox_id: str
    command: Command
    more: Callable[[], bool]
    """Whether the run has more sandboxes for the slot (its sandbox is then kept)."""
    placed: Callable[[str], None]
    """To call once the slot's room is on a node: the sandbox, and the slot's next ones, run
    there."""


class SlotRunner(Protocol[S]):
    """Where and how the sandboxes of runs run: in slots of the runner's type `S`, each room
    for one sandbox of a run's size, which runs the run's sandboxes in turn."""

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Keep what the runner knows of its machines up to date while the scheduler runs
        (`task_status` once it knows them)."""
        ...

    def unfit(self, size: Size) -> str | None:
        """Why none of the runner's machines can hold a sandbox of `size` as they are now,
        even with nothing else running (None when one can); cheap: the scheduler asks on
        every pass."""
        ...

    def new_slot(self) -> S:
        """A slot of no room yet (a runner finds its room as it runs its first sandbox)."""
        ...

    async def run(self, slot: S, turn: Turn) -> Outcome:
        """Run the sandbox of `turn` in `slot` (made anew from the slot's last where it can
        be, kept for the next while `turn.more()`); its outcome (without its tails, which
        the command keeps). Cancelled when its run is."""
        ...

    async def end_slot(self, slot: S) -> None:
        """End what `slot` holds (the sandbox it kept, its room)."""
        ...

    async def create_sandbox(
        self, sandbox_id: str, size: Size, outbound: Outbound | None, files: Origin = None
    ) -> LiveSandbox:
        """Make a sandbox outside runs, with the files of a snapshot or of a live sandbox if
        given, routed out under `outbound` (SandboxError or OSError when it cannot)."""
        ...

    def snapshot_lost(self, snapshot_id: str) -> str | None:
        """Why a snapshot `save` made is gone, or None while it is held."""
        ...

    async def drop_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot a sandbox's `save` made."""
        ...

    def keep_snapshots(self, snapshot_ids: Collection[str]) -> None:
        """Remove every snapshot `save` made but these; blocks."""
        ...

    async def aclose(self) -> None:
        """End every sandbox and give back what the runner holds."""
        ...


class Scheduler(Generic[S]):
    """Runs the sandboxes of one server's runs in the slots of `runner` (an `Engine`)."""

    def __init__(
        self,
        runs: Runs,
        settings: Settings,
        credentials: SandboxCredentials,
        runner: SlotRunner[S],
    ) -> None:
        self._records = runs
        self._settings = settings
        self._credentials = credentials
        self._runner = runner
        self._max_running = 0
        self._runs: dict[str, EngineRun] = {}
        self._booked_gb = 0
        self._running = 0
        self._wakeup = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

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
            self._records.set_error(run.id, error)
            self._end_run(run.id, "failed", error)

    def _end_run(self, run_id: str, status: EndStatus, reason: str) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        run.queue.clear()
        run.ending = (status, reason)
        self._records.end_queued(run_id, Outcome(status, reason))
        for scope in run.active.values():
            scope.cancel()
        self._maybe_complete(run_id)
        self._wake()

    # sandboxes outside runs

    def book(self, size: Size) -> None:
        """Book memory for a sandbox outside a run, or refuse with MemoryFull."""
        total = self._settings.memory_gib
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

    async def create_sandbox(
        self, sandbox_id: str, size: Size, outbound: Outbound | None, files: Origin = None
    ) -> LiveSandbox:
        """Have the runner make a sandbox outside a run, on memory booked for it."""
        return await self._runner.create_sandbox(sandbox_id, size, outbound, files)

    def snapshot_lost(self, snapshot_id: str) -> str | None:
        """Why the runner no longer holds a snapshot (None while it does)."""
        return self._runner.snapshot_lost(snapshot_id)

    async def drop_snapshot(self, snapshot_id: str) -> None:
        """Have the runner remove a snapshot."""
        await self._runner.drop_snapshot(snapshot_id)

    def keep_snapshots(self, snapshot_ids: Collection[str]) -> None:
        """Have the runner remove every snapshot but these."""
        self._runner.keep_snapshots(snapshot_ids)

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task beside the scheduler, ended with the server (an error ends it alone)."""
        assert self._tg is not None, "the engine is not serving"
        self._tg.start_soon(_supervised, func, *args)

    async def aclose(self) -> None:
        """End every sandbox, and give back what the runner holds."""
        await self._runner.aclose()

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
            await tg.start(self._runner.serve)
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
        total = self._settings.memory_gib
        blocked: str | None = None
        launches = _LAUNCHES_PER_PASS
        for run in list(self._runs.values()):
            unfit = self._runner.unfit(run.size) if run.queue else None
            if unfit is not None:  # it waits, but holds up no run behind it
                self._set_waiting(run, unfit)
                continue
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
            self._records.set_waiting(run.id, reason)

    def _launch(self, run: EngineRun, idx: int) -> None:
        self._take(run.size)
        self.start_soon(self._slot_task, run, idx, self._begin(run, idx))

    def _begin(self, run: EngineRun, idx: int, node: str | None = None) -> anyio.CancelScope:
        scope = anyio.CancelScope()
        run.active[idx] = scope
        run.last_start = time.monotonic()
        self._records.set_booting(run.id, idx, node)
        if not run.started:
            run.started = True
            self._records.set_running(run.id)
        return scope

    def _check_stuck(self) -> None:
        limit = self._settings.stuck_timeout
        for run in list(self._runs.values()):
            if run.queue and not run.active and time.monotonic() - run.last_start > limit:
                reason = run.waiting_reason or "no sandbox could start"
                self._end_run(run.id, "failed", f"could not start for {limit:g}s: {reason}")

    def _maybe_complete(self, run_id: str) -> None:
        run = self._runs.get(run_id)
        if run is None or run.queue or run.active:
            return
        del self._runs[run_id]
        self._records.set_completed(run_id)

    # one slot

    async def _slot_task(self, run: EngineRun, idx: int, scope: anyio.CancelScope) -> None:
        """Run the sandbox `idx` of `run` in a new slot, then the run's next queued ones in
        turn (on the memory booked for the first), then end the slot."""
        slot = self._runner.new_slot()
        try:
            while True:
                await self._one(run, idx, scope, slot)
                if not run.queue:
                    return
                idx = run.queue.popleft()
                scope = self._begin(run, idx, slot.node)
        finally:
            try:
                await self._runner.end_slot(slot)
            finally:
                self._give_back(run.size)

    async def _one(self, run: EngineRun, idx: int, scope: anyio.CancelScope, slot: S) -> None:
        tails = Tails()
        outcome = Outcome("failed", "server stopped")
        try:
            with scope:
                outcome = await self._run(run, idx, slot, tails)
            if scope.cancelled_caught:
                outcome = Outcome(*run.ending)
        except Exception as ex:
            # this sandbox's failure, and nothing else's
            logger.exception("sandbox %s of run %s failed", idx, run.id)
            outcome = Outcome("failed", f"internal error: {type(ex).__name__}: {ex}")
        finally:
            self._records.set_ended(run.id, idx, tails.onto(outcome))
            del run.active[idx]
            self._maybe_complete(run.id)

    async def _run(self, run: EngineRun, idx: int, slot: S, tails: Tails) -> Outcome:
        """The sandbox's outcome, its key working from just before it runs until it ended."""
        record, records = run.record, self._records
        sandbox_id, item = records.input(run.id, idx)
        credentials = self._credentials.sandbox_env(record.lease_id, sandbox_id, record.lineage)
        env = command_env(record, idx, item, credentials)
        began = partial(records.set_command_running, run.id, idx)
        turn = Turn(
            sandbox_id,
            Command(record.spec, item, env, began, tails),
            more=lambda: bool(run.queue),
            placed=partial(records.set_node, run.id, idx),
        )
        try:
            return await self._runner.run(slot, turn)
        finally:
            self._credentials.revoke(sandbox_id)


async def _supervised(func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
    """Run a task of the engine's group, ending it alone (logged) on an error."""
    try:
        await func(*args)
    except Exception:
        logger.exception("a task of the swarm engine failed: %s", getattr(func, "__name__", func))
