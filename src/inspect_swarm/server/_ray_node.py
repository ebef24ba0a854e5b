"""What the Ray engine runs on a node of the cluster: a slot of a run, which runs the run's
sandboxes in turn, as the local engine's slots do.

Ray places the task by the sandbox's size (its vCPUs and memory as Ray resources) and runs it
in one of the node's worker processes. Each worker process keeps a sandbox host of its own (the
same isolation as the server's machine: namespaces and cgroups as root) and an event loop on a
thread for it, both kept between the tasks it runs; the state directory of each is its own
(`w<pid>` under the node's), so a worker that died leaves nothing another does not clear.

The task reports as it goes (a streaming generator): the node it runs on, then for each
sandbox the command's start and the outcome. Then it asks the server's `Dispatch` actor for
the run's next sandbox, and runs it in the last one's sandbox made anew, keeping its room; it
ends its sandbox and itself when the server has none for it. A run's cancel reaches its
running tasks through `Dispatch` too (Ray's own interrupt of a running task does not reliably
reach a task waiting on its sandbox): the sandbox is ended, then the task reports its outcome.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import queue
import shutil
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import anyio
import ray
from anyio.from_thread import BlockingPortal, start_blocking_portal

from ._isolation import IsolationConfig, SandboxError, SandboxHost
from ._model import Outcome, RunSpec, SandboxInput
from ._sandbox_command import Slot, Tails, limits, run_command

NODE_VARIABLE = "INSPECT_SWARM_NODE"
"""The variable that tells a sandbox the id of the node it runs on."""

Event = (
    tuple[Literal["node"], str]
    | tuple[Literal["running"], None]
    | tuple[Literal["ended", "ran"], Outcome]
)
"""What a slot's task reports: its node, then for each sandbox the command's start and its
outcome ("ran": both at once, for a command that ended within `_HOLD_SECONDS`)."""

_POLL_SECONDS = 0.2
"""How often a task waiting on its sandbox lets a cancel (an interrupt) in."""

_HOLD_SECONDS = 0.05
"""How long the report of a command's start waits to go with its end: a message less for
each short command, the start of a longer one reported this much later."""


@dataclass(frozen=True)
class NodeSlot:
    """What stays the same for every sandbox a slot runs: sent once, with its first."""

    isolation: IsolationConfig
    """The server's isolation, with the node's state directory (each worker takes its own
    directory under it)."""
    run_id: str
    spec: RunSpec
    dispatch: Any
    """The server's `Dispatch` actor."""
    slot_id: str
    """The slot (a Ray task) that runs the run's sandboxes in turn."""


@dataclass(frozen=True)
class NodeJob:
    """One sandbox of a run, for its slot to run."""

    sandbox_id: str
    item: SandboxInput
    env: dict[str, str]


class Dispatch:
    """The server's hand-over to the slots of its runs: a stream of each slot's next
    sandboxes, which ends when the server has no more for it, stops it or cancels its run (a
    Ray actor on the server's node: its calls are asyncio tasks that cost nothing while they
    wait)."""

    def __init__(self) -> None:
        self._runs: dict[str, _DispatchRun] = {}

    def give(self, run_id: str, slot_id: str, job: NodeJob | None) -> None:
        """The slot's next sandbox (None: the slot ends, stopping the sandbox it runs)."""
        self._run(run_id).queue(slot_id).put_nowait(job)

    async def jobs(self, run_id: str, slot_id: str) -> AsyncIterator[NodeJob]:
        """The slot's next sandboxes, each once the server gives it (a streaming call)."""
        run = self._run(run_id)
        try:
            while (job := await run.queue(slot_id).get()) is not None:
                yield job
        finally:
            run.queues.pop(slot_id, None)

    def cancel(self, run_id: str) -> None:
        """Cancel the run: the stream of every slot of it ends."""
        self._run(run_id).cancel()

    def forget(self, run_id: str) -> None:
        """The run has ended: let go of it (a slot still waiting ends)."""
        run = self._runs.pop(run_id, None)
        if run is not None:
            run.cancel()

    def _run(self, run_id: str) -> _DispatchRun:
        return self._runs.setdefault(run_id, _DispatchRun())


@dataclass
class _DispatchRun:
    """The queue of each slot of a run in the hand-over."""

    queues: dict[str, asyncio.Queue[NodeJob | None]] = field(default_factory=dict)
    cancelled: bool = False

    def queue(self, slot_id: str) -> asyncio.Queue[NodeJob | None]:
        jobs = self.queues.get(slot_id)
        if jobs is None:
            jobs = self.queues[slot_id] = asyncio.Queue()
            if self.cancelled:
                jobs.put_nowait(None)
        return jobs

    def cancel(self) -> None:
        self.cancelled = True
        for jobs in self.queues.values():
            jobs.put_nowait(None)


def process_host(isolation: IsolationConfig) -> SandboxHost:
    """A sandbox host of this worker process's own, in a directory of its own under the
    node's (those of the node's workers that died are removed first)."""
    root = isolation.state_dir
    _clear_dead_workers(root)
    host = SandboxHost(replace(isolation, state_dir=root / f"w{os.getpid()}"))
    host.reap_leftovers()
    return host


def remove_host(host: SandboxHost) -> None:
    """Remove what `host` leaves once closed: its cgroups and its directory."""
    with contextlib.suppress(Exception):
        host.cgroups.remove_base()
    shutil.rmtree(host.config.state_dir, ignore_errors=True)


class _Worker:
    """This worker process's sandbox host, on an event loop of its own."""

    def __init__(self, isolation: IsolationConfig) -> None:
        self._exit = contextlib.ExitStack()
        self.portal: BlockingPortal = self._exit.enter_context(start_blocking_portal())
        self.host = process_host(isolation)
        atexit.register(self.close)

    def close(self) -> None:
        """End every sandbox, remove the host's cgroups and directory, stop the loop."""
        with contextlib.suppress(Exception):
            self.portal.call(self.host.aclose)
        self._exit.close()
        remove_host(self.host)


_worker: _Worker | None = None


def _this_worker(isolation: IsolationConfig) -> _Worker:
    global _worker
    if _worker is None:
        _worker = _Worker(isolation)
    return _worker


def _own_directory(path: Path) -> None:
    """Make `path` a directory of this user's alone, refusing one that someone else made (or
    a link): what the sandboxes keep there is this user's, root's for namespace sandboxes."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        raise SandboxError(
            f"{path} is not a directory of this node's user ({os.geteuid()}); remove it, and "
            "the node makes it anew"
        )
    os.chmod(path, 0o700)


def _clear_dead_workers(root: Path) -> None:
    """Remove the directories of this node's workers that died (their sandboxes died with
    them; their cgroups go by the host's sweep)."""
    _own_directory(root)
    for path in root.glob("w*"):
        pid = path.name[1:]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(path, ignore_errors=True)


def run_slot(run: NodeSlot, job: NodeJob) -> Iterator[Event]:
    """Run `job`'s sandbox of `run` on this node, then the run's next ones the server gives
    this slot, reporting as it goes (see `Event`): Ray's task."""
    node = ray.get_runtime_context().get_node_id()
    yield ("node", node)
    jobs = run.dispatch.jobs.options(num_returns="streaming").remote(run.run_id, run.slot_id)
    worker = _this_worker(run.isolation)
    slot = Slot()
    try:
        next_job: NodeJob | None = job
        while next_job is not None:
            yield from _one(worker, run.spec, next_job, node, slot, jobs)
            next_job = _next(jobs)
    finally:
        worker.portal.call(slot.close)


def _next(jobs: Any) -> NodeJob | None:
    """The slot's next sandbox; None once its stream has ended."""
    try:
        job: NodeJob = ray.get(next(jobs))
    except StopIteration:
        return None
    return job


class _Stop:
    """The stop of one sandbox, asked from the task's thread, done on the loop's (where the
    sandbox's scope is, once its task has started)."""

    def __init__(self) -> None:
        self.asked = False
        self.scope: anyio.CancelScope | None = None

    def __call__(self) -> None:
        self.asked = True
        if self.scope is not None:
            self.scope.cancel()


def _one(
    worker: _Worker, spec: RunSpec, job: NodeJob, node: str, slot: Slot, jobs: Any
) -> Iterator[Event]:
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    stop = _Stop()
    worker.portal.start_task_soon(_sandbox, worker.host, spec, job, node, slot, stop, events.put)
    held = False  # the command's start, not reported yet
    try:
        while True:
            try:
                event = events.get(timeout=_HOLD_SECONDS if held else _POLL_SECONDS)
            except queue.Empty:
                if held:
                    held = False
                    yield ("running", None)
                # while a sandbox runs, the server gives its slot nothing: what comes is the
                # end of the stream (the run's cancel, or the server's stop of the slot)
                elif not stop.asked and ray.wait([jobs], num_returns=1, timeout=0)[0]:
                    worker.portal.call(stop)
                continue
            if event[0] == "running":
                held = True
            elif event[0] == "ended":
                yield ("ran", event[1]) if held else event
                return
    except BaseException:
        # interrupted by Ray, or closed: end the sandbox before the task ends
        worker.portal.call(stop)
        while events.get()[0] != "ended":
            pass
        raise


async def _sandbox(
    host: SandboxHost,
    spec: RunSpec,
    job: NodeJob,
    node: str,
    slot: Slot,
    stop: _Stop,
    report: Callable[[Event], None],
) -> None:
    tails = Tails()
    outcome = Outcome("cancelled", "cancelled")
    try:
        with anyio.CancelScope() as stop.scope:
            if stop.asked:
                stop.scope.cancel()
            started = lambda: report(("running", None))  # noqa: E731
            outcome = await _run(host, spec, job, node, slot, started, tails)
    except Exception as ex:
        outcome = Outcome("failed", f"internal error on node {node}: {type(ex).__name__}: {ex}")
    finally:
        report(("ended", tails.onto(outcome)))


async def _run(
    host: SandboxHost,
    spec: RunSpec,
    job: NodeJob,
    node: str,
    slot: Slot,
    started: Callable[[], None],
    tails: Tails,
) -> Outcome:
    cap = limits(spec.size)
    try:
        sandbox = await slot.sandbox_for(lambda new: host.create(new, cap), job.sandbox_id)
    except (SandboxError, OSError) as ex:
        return Outcome("failed", f"boot failed on node {node}: {ex}")
    keep = False
    try:
        env = {**job.env, NODE_VARIABLE: node}
        outcome = await run_command(sandbox, spec, job.item, env, started, tails)
        keep = True
        return outcome
    finally:
        # kept for the run's next sandbox, unless stopped midway: the server ends the slot
        with anyio.CancelScope(shield=True):
            await slot.done(keep)
