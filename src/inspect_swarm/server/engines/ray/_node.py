"""What the Ray engine runs on each node of the cluster: the node's agent, which makes the
sandboxes the server has placed there and does in them what the server asks.

A server has one agent on each node it uses: a Ray actor pinned to the node that asks for no
resources of its own (the room of each sandbox is held by its placement, `engines.ray._place`). It
keeps one sandbox host with the server machine's isolation (namespaces and cgroups as root),
so a node bounds its boots at once and its processes as one machine does, and its calls are
tasks of one event loop, as the local engine's sandboxes are. The host's state directory is
`w<pid>` under the node's: an agent that died leaves nothing the next one does not clear.

A run's slot runs its sandboxes here in turn, each in the last one's sandbox made anew: one
call per sandbox (`run`), answered with its outcome. The server asks when the command began
(`started`) only for a sandbox that has not ended within moments, and stops one (`stop`) when
its run is cancelled or the server no longer follows it. A long-lived sandbox is held here
too (`HeldSandbox`), and the server passes each operation on it by the sandbox's id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import shutil
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup

from ...model._types import Outcome, RunSpec, SandboxInput
from ...sandboxes._cgroups import Limits, Usage
from ...sandboxes._child_process import ChildProcess
from ...sandboxes._isolation import IsolationConfig, Sandbox, SandboxError, SandboxHost, User
from ...sandboxes._terminal import TerminalSize
from ...sandboxes._watch import Change, DirectoryWatch
from .._command import Command, Slot, Tails, limits, run_in_slot
from ._relay import PortRelays

T = TypeVar("T")

NODE_VARIABLE = "INSPECT_SWARM_NODE"
"""The variable that tells a sandbox the id of the node it runs on."""

Answer = tuple[bool, Any]
"""What the agent answers for a long-lived sandbox: (True, the value) or (False, the
exception for the server to raise, as the local engine's sandbox would)."""


@dataclass(frozen=True)
class NodeJob:
    """One sandbox of a run, for the agent of its slot's node to run."""

    slot_id: str
    sandbox_id: str
    spec: RunSpec
    item: SandboxInput
    env: dict[str, str]
    keep: bool
    """Whether the slot may run more of the run's sandboxes (its sandbox is then kept)."""


def pack(value: object) -> bytes:
    """`value` as the server and an agent pass it on the hot path (a job, an outcome):
    pickled. Ray's own serializer, made for any object and the object refs inside it, cost
    each no-op sandbox 0.5 ms more (`benchmarks/ray_engine.py`)."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def unpack(data: bytes, kind: type[T]) -> T:
    """What `pack` made of a `kind`."""
    value = pickle.loads(data)
    assert isinstance(value, kind), type(value)
    return value


@dataclass
class _Running:
    """A sandbox of a slot while it runs: its stop, and whether its command began."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    began: anyio.Event = field(default_factory=anyio.Event)
    """Set when the command begins, or the sandbox ends without it."""
    command: bool = False


@dataclass
class _SlotState:
    """What the agent keeps of a run's slot between the server's calls, until it ends."""

    slot: Slot = field(default_factory=Slot)
    running: dict[str, _Running] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)
    """Sandboxes stopped before their run began here (Ray need not start an async actor's
    calls in the order they were sent)."""


def process_host(isolation: IsolationConfig, node: str) -> SandboxHost:
    """A sandbox host of this process's own, in a directory of its own under the node's
    (those of the node's agents that died are removed first), keeping its snapshots in the
    node's directory of the server's snapshots (past this agent's end, as the server's
    store keeps them past its own)."""
    root = isolation.state_dir
    _clear_dead_agents(root)
    snapshots = (isolation.snapshot_dir or root / "snapshots") / node
    host = SandboxHost(
        replace(isolation, state_dir=root / f"w{os.getpid()}", snapshot_dir=snapshots)
    )
    host.reap_leftovers()
    return host


def remove_host(host: SandboxHost) -> None:
    """Remove what `host` leaves once closed: its cgroups and its directory."""
    with contextlib.suppress(Exception):
        host.cgroups.remove_base()
    shutil.rmtree(host.config.state_dir, ignore_errors=True)


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


def _clear_dead_agents(root: Path) -> None:
    """Remove the directories of this node's agents that died (their sandboxes died with
    them; their cgroups go by the host's sweep)."""
    _own_directory(root)
    for path in root.glob("w*"):
        pid = path.name[1:]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(path, ignore_errors=True)


def _clear_dead_nodes(root: Path, nodes: list[str]) -> None:
    """Remove the snapshots of the nodes that left the cluster (a node never comes back
    under the same id)."""
    for path in root.iterdir():
        if path.name not in nodes:
            shutil.rmtree(path, ignore_errors=True)


async def _answer(call: Callable[[], Awaitable[Any]]) -> Answer:
    try:
        return True, await call()
    except Exception as ex:
        return False, ex


class _Root:
    """A lasting task that an agent's work runs under, on the event loop Ray runs its calls
    on.

    Ray makes each call a task of its own with nothing above it, and anyio ends the worker
    threads that work started once the root of its task ends: each call would start threads
    of its own (a sandbox's file work takes two or more). Work run here shares one root, and
    so its threads. Elsewhere than asyncio (trio, in tests), there is a root already.
    """

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._group: TaskGroup | None = None
        self._closed = False

    async def run(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`await func(*args)`, under the root."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio
            return await func(*args)
        if self._task is None:
            self._task = loop.create_task(self._serve())
        await self._ready.wait()
        assert self._group is not None
        answer: asyncio.Future[T] = loop.create_future()

        async def call() -> None:
            try:
                result = await func(*args)
            except Exception as ex:
                if not answer.done():
                    answer.set_exception(ex)
                return
            if not answer.done():
                answer.set_result(result)

        self._group.start_soon(call)
        return await answer

    async def _serve(self) -> None:
        async with anyio.create_task_group() as group:
            self._group = group
            self._ready.set()
            await anyio.sleep_forever()

    @property
    def closed(self) -> bool:
        """Whether the root has ended."""
        return self._closed

    async def aclose(self) -> None:
        """End the root, and the work still under it."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class NodeAgent:
    """The sandboxes one server has placed on this node (a Ray actor, whose calls are tasks
    of its event loop)."""

    def __init__(self, isolation: IsolationConfig, node: str, address: str) -> None:
        self.node = node
        self.address = address
        """The node's address in the cluster, where the server connects to sandboxes' ports."""
        self._root = _Root()
        self._host = process_host(isolation, node)
        self._slots: dict[str, _SlotState] = {}
        self._held: dict[str, HeldSandbox] = {}

    # the slots of runs

    async def run(self, job: bytes) -> bytes:
        """Run a `NodeJob`'s sandbox (packed) in its slot's last one made anew, or a new one;
        its `Outcome` (packed), with the output so far when it was stopped. The sandbox is
        kept for the slot's next if the job says so and its command ran to its end, else
        ended before the answer."""
        return pack(await self._root.run(self._run_slot, unpack(job, NodeJob)))

    async def _run_slot(self, job: NodeJob) -> Outcome:
        state = self._slots.setdefault(job.slot_id, _SlotState())
        running = state.running[job.sandbox_id] = _Running()
        if job.sandbox_id in state.stopped:
            running.scope.cancel()
        tails = Tails()
        outcome = Outcome("cancelled", "cancelled")
        try:
            with running.scope:
                outcome = await self._run(state.slot, job, running, tails)
        except Exception as ex:
            outcome = Outcome("failed", f"internal error on node {self.node}: {_why(ex)}")
        finally:
            del state.running[job.sandbox_id]
            state.stopped.discard(job.sandbox_id)
            running.began.set()
        return tails.onto(outcome)

    async def _run(self, slot: Slot, job: NodeJob, running: _Running, tails: Tails) -> Outcome:
        def began() -> None:
            running.command = True
            running.began.set()

        env = {**job.env, NODE_VARIABLE: self.node}
        command = Command(job.spec, job.item, env, began, tails)
        boot = partial(self._host.create, limits=limits(job.spec.size))
        return await run_in_slot(slot, boot, job.sandbox_id, command, lambda: job.keep)

    async def started(self, slot_id: str, sandbox_id: str) -> bool:
        """Return once the sandbox's command has begun (True), or at once when the sandbox
        does not run here now (False: not begun yet, or ended)."""
        state = self._slots.get(slot_id)
        running = None if state is None else state.running.get(sandbox_id)
        if running is None:
            return False
        await running.began.wait()
        return running.command

    def stop(self, slot_id: str, sandbox_id: str) -> None:
        """Stop a sandbox of the slot midway (or before it begins here)."""
        state = self._slots.setdefault(slot_id, _SlotState())
        running = state.running.get(sandbox_id)
        if running is None:
            state.stopped.add(sandbox_id)
        else:
            running.scope.cancel()

    async def end_slot(self, slot_id: str) -> None:
        """The slot has ended: end the sandbox it kept, and let go of it."""
        await self._root.run(self._end_slot, slot_id)

    async def _end_slot(self, slot_id: str) -> None:
        state = self._slots.pop(slot_id, None)
        if state is not None:
            for running in state.running.values():
                running.scope.cancel()
            await state.slot.close()

    # long-lived sandboxes

    async def create(
        self, sandbox_id: str, cap: Limits, snapshot: str | None = None, source: str | None = None
    ) -> Answer:
        """Make a long-lived sandbox here, with the files of this node's snapshot `snapshot`
        or of the sandbox `source` of this node (frozen by the server) if given."""

        async def create() -> None:
            of = None if source is None else self._held.get(source)
            if source is not None and of is None:
                raise SandboxError(f"sandbox {source} is not on node {self.node}")
            sandbox = await self._host.create(
                sandbox_id, cap, snapshot if of is None else of.sandbox
            )
            self._held[sandbox_id] = HeldSandbox(sandbox, self.node, PortRelays(self.address))

        return await _answer(create)

    async def drop_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot of this node's."""
        await self._host.drop_snapshot(snapshot_id)

    async def keep_snapshots(self, snapshot_ids: list[str], nodes: list[str]) -> list[str]:
        """Remove every snapshot of this node's but these, and those that nodes no longer
        alive (all but `nodes`) left on this machine; those left of this node's."""
        host = self._host
        await anyio.to_thread.run_sync(host.keep_snapshots, snapshot_ids)
        await anyio.to_thread.run_sync(_clear_dead_nodes, host.snapshot_dir.parent, nodes)
        return sorted(path.name for path in host.snapshot_dir.iterdir())

    async def held(self, sandbox_id: str, operation: Callable[..., Any], *args: Any) -> Answer:
        """`operation` (a method of `HeldSandbox`) on a long-lived sandbox of this node."""
        sandbox = self._held.get(sandbox_id)
        if sandbox is None:
            return False, SandboxError(f"sandbox {sandbox_id} is not on node {self.node}")

        async def call() -> Any:
            result = operation(sandbox, *args)
            return await result if isinstance(result, Awaitable) else result

        return await self._root.run(_answer, call)

    async def close(self, sandbox_id: str) -> Answer:
        """End a long-lived sandbox, and remove everything of it."""
        sandbox = self._held.pop(sandbox_id, None)
        if sandbox is None:
            return True, None
        return await self._root.run(_answer, sandbox.close)

    async def aclose(self) -> None:
        """End every sandbox of this node's, and remove the host's cgroups and directory (once:
        the agent is done with)."""
        if self._root.closed:
            return
        await self._root.run(self._close)
        await self._root.aclose()

    async def _close(self) -> None:
        for slot_id in list(self._slots):
            await self._end_slot(slot_id)
        for sandbox in self._held.values():
            await _answer(sandbox.close)
        self._held.clear()
        await self._host.aclose()
        await anyio.to_thread.run_sync(remove_host, self._host)


class HeldSandbox:
    """A long-lived sandbox on its node, and the operations on it that the server passes on
    (starting processes and following their output, their input and signals, users, file
    work as a user, connections to its ports)."""

    def __init__(self, sandbox: Sandbox, node: str, ports: PortRelays) -> None:
        self.sandbox = sandbox
        self._node = node
        self._ports = ports
        self._processes: dict[int, ChildProcess] = {}
        self._readers: dict[tuple[int, str], AsyncIterator[bytes]] = {}
        self._watches: dict[int, tuple[DirectoryWatch, AsyncIterator[list[Change]]]] = {}
        self._keys = itertools.count()
        self._waits: list[tuple[anyio.CancelScope, anyio.Event]] = []

    async def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None,
        user: User,
        stdin: bool,
        terminal: TerminalSize | None,
    ) -> tuple[int, int]:
        """Start a process: (its key here, its pid in the sandbox)."""
        env = {**env, NODE_VARIABLE: self._node}
        process = await self.sandbox.exec(argv, env, cwd, user, stdin, terminal)
        key = next(self._keys)
        self._processes[key] = process
        return key, process.pid

    async def read(self, key: int, stream: str) -> bytes:
        """The process's next output on `stream` (b"" at its end)."""
        process = self._processes.get(key)
        if process is None:
            return b""
        reader = self._readers.setdefault((key, stream), process.chunks(stream))
        chunk = await anext(reader, b"")
        if not chunk:
            self._readers.pop((key, stream), None)
        return chunk

    async def wait(self, key: int) -> int:
        """Wait for the process to exit; its exit status."""
        return await self._processes[key].wait()

    def signal(self, key: int, sig: int) -> None:
        """Signal the process's group."""
        if (process := self._processes.get(key)) is not None:
            process.signal(sig)

    async def write_stdin(self, key: int, data: bytes) -> None:
        """Feed the process's stdin."""
        await self._processes[key].write_stdin(data)

    def close_stdin(self, key: int) -> None:
        """Close the process's stdin."""
        if (process := self._processes.get(key)) is not None:
            process.close_stdin()

    async def usage(self) -> Usage:
        """What the sandbox uses now."""
        return await anyio.to_thread.run_sync(self.sandbox.usage)

    async def freeze(self, frozen: bool) -> None:
        """Freeze (or thaw) the sandbox's processes."""
        await self.sandbox.freeze(frozen)

    async def save(self, snapshot_id: str, most: int) -> int:
        """Copy the sandbox's files aside as this node's snapshot `snapshot_id`."""
        return await self.sandbox.save(snapshot_id, most)

    async def watch(self, user: User, path: str, recursive: bool) -> int:
        """Watch a directory of the sandbox: the watch's key here."""
        watch = await self.sandbox.watch(user, path, recursive)
        key = next(self._keys)
        self._watches[key] = (watch, watch.changes())
        return key

    async def changes(self, key: int) -> list[Change] | None:
        """The watch's next batch of changes (None at its end)."""
        if (found := self._watches.get(key)) is None:
            return None
        batch = await anext(found[1], None)
        if batch is None:
            self.unwatch(key)
        return batch

    def unwatch(self, key: int) -> None:
        """Stop a watch."""
        if (found := self._watches.pop(key, None)) is not None:
            found[0].close()

    def resize(self, key: int, size: TerminalSize) -> None:
        """Resize the process's terminal."""
        if (process := self._processes.get(key)) is not None:
            process.resize(size)

    def forget(self, key: int) -> None:
        """Let go of a process that exited."""
        if (process := self._processes.pop(key, None)) is not None:
            self.sandbox.forget(process)

    async def user(self, name: str) -> User:
        """A user of the sandbox."""
        return await anyio.to_thread.run_sync(self.sandbox.user, name)

    async def as_user(self, user: User, operation: Callable[[str], T]) -> T:
        """`operation(root)` on the sandbox's files with `user`'s rights."""
        return await anyio.to_thread.run_sync(self.sandbox.as_user, user, operation)

    async def open_port(self, port: int) -> tuple[tuple[str, int], bytes]:
        """Dial `port` on the sandbox's loopback for the server: where the server connects
        for it, and the one-time token it sends first (see `engines.ray._relay`)."""
        return await self._ports.open(self.sandbox.dial, port)

    async def relay_port(self, token: bytes) -> None:
        """Relay the connection of the port opened with `token`, until either side closes."""
        await self._ports.relay(token)

    async def ended(self) -> None:
        """Return once the sandbox's PID 1 has ended (or the sandbox is being closed)."""
        if self._waits:
            # the server gave up an earlier call (a timeout that paused the sandbox), which
            # waits on still: PID 1 is waited for by one task at a time
            await self._waits[-1][1].wait()
            return
        wait = (anyio.CancelScope(), anyio.Event())
        self._waits.append(wait)
        try:
            with wait[0]:
                await self.sandbox.ended()
        finally:
            wait[1].set()
            self._waits.remove(wait)

    async def close(self) -> None:
        """End the sandbox, and remove everything of it."""
        # PID 1 is waited for by one task at a time: the close's, now
        for scope, done in list(self._waits):
            scope.cancel()
            await done.wait()
        await self._ports.aclose()
        await self.sandbox.close()


def _why(ex: BaseException) -> str:
    return f"{type(ex).__name__}: {ex}"
