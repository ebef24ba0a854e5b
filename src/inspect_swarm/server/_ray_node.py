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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
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
    tuple[Literal["node"], str] | tuple[Literal["running"], None] | tuple[Literal["ended"], Outcome]
)
"""What a slot's task reports: its node, then for each sandbox the command's start and its
outcome."""

_POLL_SECONDS = 0.2
"""How often a task waiting on its sandbox lets a cancel (an interrupt) in."""


@dataclass(frozen=True)
class NodeJob:
    """Everything a node needs to run one sandbox of a run."""

    isolation: IsolationConfig
    """The server's isolation, with the node's state directory (each worker takes its own
    directory under it)."""
    sandbox_id: str
    run_id: str
    spec: RunSpec
    item: SandboxInput
    env: dict[str, str]
    dispatch: Any
    """The server's `Dispatch` actor."""
    slot_id: str
    """The slot (a Ray task) that runs it, and may run the run's next ones."""


class Dispatch:
    """The server's record of cancelled runs and stopped slots, which each slot of a run waits
    on, and the next sandbox of each slot (a Ray actor on the server's node: its calls are
    asyncio tasks that cost nothing while they wait)."""

    def __init__(self) -> None:
        self._runs: dict[str, asyncio.Event] = {}
        self._slots: dict[str, asyncio.Queue[NodeJob | None]] = {}
        self._stops: dict[str, asyncio.Event] = {}

    def give(self, slot_id: str, job: NodeJob | None) -> None:
        """The slot's next sandbox (None: the slot ends)."""
        self._slots.setdefault(slot_id, asyncio.Queue()).put_nowait(job)

    async def next(self, slot_id: str, run_id: str) -> NodeJob | None:
        """The slot's next sandbox, once the server gives it; None once the run is cancelled,
        the slot stopped or ended."""
        queue = self._slots.setdefault(slot_id, asyncio.Queue())
        given = asyncio.ensure_future(queue.get())
        ended = [asyncio.ensure_future(w) for w in (self.wait(run_id), self.stopped(slot_id))]
        await asyncio.wait((given, *ended), return_when=asyncio.FIRST_COMPLETED)
        for waiting in ended:
            waiting.cancel()
        job = None
        if given.done():
            job = given.result()
        else:
            given.cancel()
        if job is None:
            self._slots.pop(slot_id, None)
            self.stop(slot_id)  # its waits return
            self._stops.pop(slot_id, None)
        return job

    async def wait(self, run_id: str) -> None:
        """Return once the run is cancelled (or forgotten)."""
        await self._runs.setdefault(run_id, asyncio.Event()).wait()

    async def stopped(self, slot_id: str) -> None:
        """Return once the slot is stopped (or has ended)."""
        await self._stops.setdefault(slot_id, asyncio.Event()).wait()

    def stop(self, slot_id: str) -> None:
        """Stop the slot (the server no longer follows it, as when it stops): its sandbox
        ends, and the slot with it."""
        self._stops.setdefault(slot_id, asyncio.Event()).set()

    def cancel(self, run_id: str) -> None:
        """Cancel the run: its tasks' waits return."""
        self._runs.setdefault(run_id, asyncio.Event()).set()

    def forget(self, run_id: str) -> None:
        """The run has ended: let go of its waits."""
        event = self._runs.pop(run_id, None)
        if event is not None:
            event.set()


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


def run_slot(job: NodeJob) -> Iterator[Event]:
    """Run `job`'s sandbox on this node, then the run's next ones the server gives this slot,
    reporting as it goes (see `Event`): Ray's task."""
    node = ray.get_runtime_context().get_node_id()
    yield ("node", node)
    # the run's cancel, or the server's stop of this slot
    ended = [job.dispatch.wait.remote(job.run_id), job.dispatch.stopped.remote(job.slot_id)]
    worker = _this_worker(job.isolation)
    slot = Slot()
    try:
        next_job: NodeJob | None = job
        while next_job is not None:
            yield from _one(worker, next_job, node, slot, ended)
            next_job = ray.get(job.dispatch.next.remote(job.slot_id, job.run_id))
    finally:
        worker.portal.call(slot.close)


def _one(worker: _Worker, job: NodeJob, node: str, slot: Slot, ended: list[Any]) -> Iterator[Event]:
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    # made on the loop's thread (a running task's future cannot be cancelled: its scope can)
    scope = worker.portal.call(anyio.CancelScope)
    worker.portal.start_task_soon(_sandbox, worker.host, job, node, slot, scope, events.put)
    try:
        while True:
            try:
                event = events.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                # the run's cancel or the slot's stop (the waits' answers come to this worker:
                # no call to see them)
                if not scope.cancel_called and ray.wait(ended, num_returns=1, timeout=0)[0]:
                    worker.portal.call(scope.cancel)
                continue
            yield event
            if event[0] == "ended":
                return
    except BaseException:
        # interrupted by Ray, or closed: end the sandbox before the task ends
        worker.portal.call(scope.cancel)
        while events.get()[0] != "ended":
            pass
        raise


async def _sandbox(
    host: SandboxHost,
    job: NodeJob,
    node: str,
    slot: Slot,
    scope: anyio.CancelScope,
    report: Callable[[Event], None],
) -> None:
    tails = Tails()
    outcome = Outcome("cancelled", "cancelled")
    try:
        with scope:
            started = lambda: report(("running", None))  # noqa: E731
            outcome = await _run(host, job, node, slot, started, tails)
    except Exception as ex:
        outcome = Outcome("failed", f"internal error on node {node}: {type(ex).__name__}: {ex}")
    finally:
        report(("ended", tails.onto(outcome)))


async def _run(
    host: SandboxHost,
    job: NodeJob,
    node: str,
    slot: Slot,
    started: Callable[[], None],
    tails: Tails,
) -> Outcome:
    cap = limits(job.spec.size)
    try:
        sandbox = await slot.sandbox_for(lambda new: host.create(new, cap), job.sandbox_id)
    except (SandboxError, OSError) as ex:
        return Outcome("failed", f"boot failed on node {node}: {ex}")
    keep = False
    try:
        env = {**job.env, NODE_VARIABLE: node}
        outcome = await run_command(sandbox, job.spec, job.item, env, started, tails)
        keep = True
        return outcome
    finally:
        # kept for the run's next sandbox, unless stopped midway: the server ends the slot
        with anyio.CancelScope(shield=True):
            await slot.done(keep)
