"""Long-lived sandboxes on a Ray cluster, as the server sees them: each one in room that Ray
placed on a node (`engines.ray._place`), held there by the node's agent (`engines.ray._node`), and used
through stand-ins that pass every operation to that agent.

The room is booked for the sandbox's whole life, and given back once it has ended. The server
reaches a sandbox only through its node's agent; a sandbox reaches nothing of the cluster
(its network is its own).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import ray
import ray.exceptions

from ...model._types import GIB
from ...sandboxes._cgroups import Limits, Usage
from ...sandboxes._isolation import ROOT, SandboxError, User
from ...sandboxes._ports import DIAL_TIMEOUT
from ...sandboxes._terminal import TerminalSize
from ...sandboxes._watch import Change
from ._calls import AgentHandle, Pending, answer
from ._node import Answer, HeldSandbox
from ._place import Agents, Room, live_nodes
from ._snapshots import NodeSnapshots

T = TypeVar("T")

logger = logging.getLogger(__name__)

_PLACE_SECONDS = 120.0
"""How long a sandbox may wait for a node with room for it."""
_PLACE_ATTEMPTS = 3
"""Tries at placing a sandbox whose node dies before it is made there."""

_CLOSE_SECONDS = 30.0
"""How long a sandbox's node has to end it before the server stops waiting."""


def _value(answer: Answer) -> Any:
    ok, value = answer
    if not ok:
        raise value
    return value


class RayProcess:
    """A process of a sandbox on a node, as the server sees it (a `LiveProcess`)."""

    def __init__(self, sandbox: RaySandbox, key: int, pid: int, terminal: bool) -> None:
        self._sandbox = sandbox
        self.key = key
        self._pid = pid
        self.terminal = terminal
        self._returncode: int | None = None

    @property
    def pid(self) -> int:
        """Its pid in the sandbox."""
        return self._pid

    @property
    def returncode(self) -> int | None:
        """Its exit status once waited for."""
        return self._returncode

    async def wait(self) -> int:
        """Wait for it to exit (killed with its node: SIGKILL's status)."""
        if self._returncode is None:
            try:
                self._returncode = await self._sandbox.call(HeldSandbox.wait, self.key)
            except ray.exceptions.RayError:
                self._returncode = -9
        return self._returncode

    def signal(self, sig: int) -> None:
        """Signal its process group."""
        self._sandbox.send(HeldSandbox.signal, self.key, sig)

    async def chunks(self, stream: str) -> AsyncIterator[bytes]:
        """Its output on `stream` until its end (or its node's)."""
        while True:
            try:
                chunk: bytes = await self._sandbox.call(HeldSandbox.read, self.key, stream)
            except ray.exceptions.RayError:
                return
            if not chunk:
                return
            yield chunk

    async def write_stdin(self, data: bytes) -> None:
        """Write all of `data` to its stdin."""
        try:
            await self._sandbox.call(HeldSandbox.write_stdin, self.key, data)
        except ray.exceptions.RayError:
            raise BrokenPipeError("the sandbox's node is gone") from None

    def close_stdin(self) -> None:
        """Close its stdin."""
        self._sandbox.send(HeldSandbox.close_stdin, self.key)

    def resize(self, size: TerminalSize) -> None:
        """Resize its terminal."""
        if not self.terminal:
            raise ValueError(f"process {self._pid} has no terminal")
        self._sandbox.send(HeldSandbox.resize, self.key, size)


class RayWatch:
    """A watch of a directory of a sandbox on a node, as the server sees it (a `LiveWatch`)."""

    def __init__(self, sandbox: RaySandbox, key: int) -> None:
        self._sandbox = sandbox
        self._key = key

    async def changes(self) -> AsyncIterator[list[Change]]:
        """Batches of changes until the watch's end (or its node's)."""
        while True:
            try:
                batch = await self._sandbox.call(HeldSandbox.changes, self._key)
            except ray.exceptions.RayError:
                return
            if batch is None:
                return
            yield batch

    def close(self) -> None:
        """Stop watching."""
        self._sandbox.send(HeldSandbox.unwatch, self._key)


class RaySandbox:
    """A long-lived sandbox on a node, as the server sees it (a `LiveSandbox`)."""

    def __init__(
        self,
        agent: AgentHandle,
        room: Room,
        sandbox_id: str,
        node: str,
        snapshots: NodeSnapshots,
    ) -> None:
        self._agent = agent
        self._room = room
        self.id = sandbox_id
        self._node = node
        self._snapshots = snapshots

    @property
    def node(self) -> str | None:
        """The node Ray placed it on."""
        return self._node

    async def call(self, operation: Callable[..., Any], *args: Any) -> Any:
        """`operation` (a method of `HeldSandbox`) on the sandbox, on its node."""
        return _value(await answer(self._agent.held.remote(self.id, operation, *args)))

    def send(self, operation: Callable[..., Any], *args: Any) -> None:
        """`operation` on the sandbox, without waiting for it."""
        self._agent.held.remote(self.id, operation, *args)

    async def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        user: User = ROOT,
        stdin: bool = False,
        terminal: TerminalSize | None = None,
    ) -> RayProcess:
        """Start `argv` in the sandbox, on its node."""
        args = (argv, dict(env), cwd, user, stdin, terminal)
        try:
            key, pid = await self.call(HeldSandbox.exec, *args)
        except ray.exceptions.RayError:
            raise SandboxError(self._gone()) from None
        return RayProcess(self, key, pid, terminal is not None)

    def usage(self) -> Usage:
        """What the sandbox uses now, on its node (blocks)."""
        return self._blocking(HeldSandbox.usage)  # type: ignore[no-any-return]

    async def freeze(self, frozen: bool) -> None:
        """Freeze (or thaw) the sandbox's processes, on its node."""
        try:
            await self.call(HeldSandbox.freeze, frozen)
        except ray.exceptions.RayError:
            raise ProcessLookupError(errno.ESRCH, self._gone()) from None

    async def save(self, snapshot_id: str, most: int) -> int:
        """Copy the sandbox's files aside as a snapshot kept on its node."""
        try:
            taken: int = await self.call(HeldSandbox.save, snapshot_id, most)
        except ray.exceptions.RayError:
            raise SandboxError(self._gone()) from None
        self._snapshots.saved(snapshot_id, self._node)
        return taken

    def dial(self, port: int) -> socket.socket:
        """A connection to `port` on the sandbox's loopback, relayed by its node's agent
        (`engines.ray._relay`); blocks."""
        address, token = self._blocking(HeldSandbox.open_port, port)
        self.send(HeldSandbox.relay_port, token)
        sock = socket.create_connection(address, timeout=DIAL_TIMEOUT)
        try:
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(token)
        except BaseException:
            sock.close()
            raise
        return sock

    async def watch(self, user: User, path: str, recursive: bool) -> RayWatch:
        """Watch a directory of the sandbox, on its node."""
        try:
            key = await self.call(HeldSandbox.watch, user, path, recursive)
        except ray.exceptions.RayError:
            raise ProcessLookupError(errno.ESRCH, self._gone()) from None
        return RayWatch(self, key)

    def forget(self, process: Any) -> None:
        """Let go of a process that exited."""
        self.send(HeldSandbox.forget, process.key)

    def user(self, name: str) -> User:
        """A user of the sandbox (blocks)."""
        return self._blocking(HeldSandbox.user, name)  # type: ignore[no-any-return]

    def as_user(self, user: User, operation: Callable[[str], T]) -> T:
        """`operation(root)` on the sandbox's files, on its node, as `user` (blocks)."""
        return self._blocking(HeldSandbox.as_user, user, operation)  # type: ignore[no-any-return]

    async def ended(self) -> str | None:
        """Wait until the sandbox ends on its own, or its node does (which says so)."""
        try:
            await self.call(HeldSandbox.ended)
        except ray.exceptions.RayError:
            return f"node lost: {self._node}"
        return None

    async def close(self) -> None:
        """End the sandbox on its node, then give its room back."""
        # a node gone took the sandbox with it; one that hangs has a while
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(_CLOSE_SECONDS),
            contextlib.suppress(ray.exceptions.RayError),
        ):
            ok, error = await answer(self._agent.close.remote(self.id))
            if not ok:
                logger.warning("sandbox %s on node %s: %r", self.id, self._node, error)
        self._room.release()

    def _blocking(self, operation: Callable[..., Any], *args: Any) -> Any:
        try:
            return _value(ray.get(self._agent.held.remote(self.id, operation, *args)))
        except ray.exceptions.RayError:
            raise ProcessLookupError(errno.ESRCH, self._gone()) from None

    def _gone(self) -> str:
        return f"sandbox {self.id} is gone with its node {self._node}"


@dataclass(frozen=True)
class Placing:
    """A long-lived sandbox to place: its id and room, and where its files come from."""

    sandbox_id: str
    cap: Limits
    files: str | RaySandbox | None = None
    """What its files start as: a snapshot of the server's (its id), or a sandbox's (a
    fork), on the node that holds them."""

    def node(self, snapshots: NodeSnapshots) -> str | None:
        """The node the sandbox must be made on (None: any with room)."""
        if isinstance(self.files, RaySandbox):
            return self.files.node
        return None if self.files is None else snapshots.node(self.files)

    def origin(self) -> tuple[str | None, str | None]:
        """The snapshot and the sandbox, by id, that the node's agent makes it from."""
        if isinstance(self.files, RaySandbox):
            return None, self.files.id
        return self.files, None


async def place_sandbox(agents: Agents, snapshots: NodeSnapshots, placing: Placing) -> RaySandbox:
    """Have Ray place a sandbox on a node with room for it (the node of its snapshot or
    source, if it has one), and make it there (SandboxError when it cannot, or no node has
    had room for a while)."""
    deadline = anyio.current_time() + _PLACE_SECONDS
    lost: ray.exceptions.RayActorError | None = None
    node = placing.node(snapshots)
    for _ in range(_PLACE_ATTEMPTS):
        if node is not None and node not in await anyio.to_thread.run_sync(live_nodes):
            snapshots.left(node)
            raise SandboxError(f"node {node}, which holds the sandbox's files, left the cluster")
        room = Room(placing.cap, node)
        try:
            return await _place(agents, snapshots, room, placing, deadline)
        except ray.exceptions.RayActorError as ex:
            # its node (or its agent) went before the sandbox was made there, Ray having not
            # yet seen it go: another node may have room
            lost = ex
        except BaseException:
            room.release()
            raise
        room.release()
    raise SandboxError(f"the sandbox's node failed it: {lost}")


async def _place(
    agents: Agents, snapshots: NodeSnapshots, room: Room, placing: Placing, deadline: float
) -> RaySandbox:
    """One try of `place_sandbox` (RayActorError when its node's agent was lost first)."""
    cap, sandbox_id = placing.cap, placing.sandbox_id
    try:
        with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
            node = await room.node()
    except TimeoutError:
        pinned = placing.node(snapshots)
        where = "the cluster" if pinned is None else f"node {pinned}, which holds its files,"
        raise SandboxError(
            f"{where} had no room for {cap.vcpus} vCPUs and {cap.memory_bytes // GIB} GiB "
            f"for {_PLACE_SECONDS:g}s; end sandboxes or add nodes"
        ) from None
    agent = agents.on(node)
    made = Pending(agent.create.remote(sandbox_id, cap, *placing.origin()))
    try:
        answered = await made.result()
    except ray.exceptions.RayActorError as ex:
        _, ended = await agents.lost(node, agent, ex)
        if not ended:
            agent.close.remote(sandbox_id)  # if the agent lives, it ends what it made
        raise
    except BaseException as ex:
        # cancelled, or failed in Ray: once the making is over, end what it made
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(_CLOSE_SECONDS),
            contextlib.suppress(ray.exceptions.RayError),
        ):
            await made.result()
            await answer(agent.close.remote(sandbox_id))
        if isinstance(ex, ray.exceptions.RayError):
            raise SandboxError(f"the sandbox's node failed it: {ex}") from None
        raise
    _value(answered)  # the agent's own refusal (a boot that failed): it holds nothing
    return RaySandbox(agent, room, sandbox_id, node, snapshots)
