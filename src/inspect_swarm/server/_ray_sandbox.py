"""Long-lived sandboxes on a Ray cluster: each one held by a relay (a Ray actor) on the node
Ray placed it on, and used from the server through stand-ins that relay every operation.

The relay asks for the sandbox's vCPUs and memory as Ray resources, so Ray's scheduler puts it
on a node with room for it and keeps that room for the sandbox's life. On its node, the relay
makes the sandbox with the same isolation runtime as the server's machine (`_ray_node`) and
answers the operations the E2B surface needs: start a process and follow its output, feed and
signal it, look a user up, file work as a user. The server reaches a sandbox only through its
relay; a sandbox reaches nothing of the cluster (its network is its own).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import ray
import ray.exceptions

from ._cgroups import Limits
from ._child_process import ChildProcess
from ._isolation import ROOT, IsolationConfig, Sandbox, SandboxError, SandboxHost, User
from ._model import GIB
from ._ray_node import NODE_VARIABLE, process_host, remove_host

T = TypeVar("T")

logger = logging.getLogger(__name__)

Answer = tuple[bool, Any]
"""What a relay answers: (True, the value) or (False, the exception to raise)."""

_PLACE_SECONDS = 120.0
"""How long a sandbox may wait for a node with room for it."""
_PLACE_ATTEMPTS = 3
"""Tries at placing a sandbox whose node dies before it is made there."""

_CLOSE_SECONDS = 30.0
"""How long a sandbox's node has to end it before its relay is killed anyway."""

_CONCURRENCY = 10_000
"""The most calls one relay serves at once (each process's reads and waits among them)."""


async def _answer(call: Callable[[], Any]) -> Answer:
    try:
        return True, await call()
    except Exception as ex:  # the caller's to raise, as the local engine's sandbox would
        return False, ex


class SandboxRelay:
    """One long-lived sandbox on its node, and the operations on it (a Ray actor, whose
    calls are tasks of its own event loop)."""

    def __init__(self, isolation: IsolationConfig) -> None:
        self._isolation = isolation
        self._node = ray.get_runtime_context().get_node_id()
        self._host: SandboxHost | None = None
        self._sandbox: Sandbox | None = None
        self._processes: dict[int, ChildProcess] = {}
        self._readers: dict[tuple[int, str], AsyncIterator[bytes]] = {}
        self._keys = itertools.count()
        self._waits: list[tuple[anyio.CancelScope, anyio.Event]] = []

    async def create(self, sandbox_id: str, limits: Limits) -> Answer:
        """Make the sandbox; its node's id."""

        async def create() -> str:
            self._host = await anyio.to_thread.run_sync(process_host, self._isolation)
            self._sandbox = await self._host.create(sandbox_id, limits)
            return self._node

        return await _answer(create)

    async def exec(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None, user: User, stdin: bool
    ) -> Answer:
        """Start a process: (its key here, its pid in the sandbox)."""

        async def start() -> tuple[int, int]:
            process = await self._live().exec(
                argv, {**env, NODE_VARIABLE: self._node}, cwd, user, stdin
            )
            key = next(self._keys)
            self._processes[key] = process
            return key, process.pid

        return await _answer(start)

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

    async def write_stdin(self, key: int, data: bytes) -> Answer:
        """Feed the process's stdin."""
        return await _answer(lambda: self._processes[key].write_stdin(data))

    def close_stdin(self, key: int) -> None:
        """Close the process's stdin."""
        if (process := self._processes.get(key)) is not None:
            process.close_stdin()

    def forget(self, key: int) -> None:
        """Let go of a process that exited."""
        if (process := self._processes.pop(key, None)) is not None:
            self._live().forget(process)

    async def user(self, name: str) -> Answer:
        """A user of the sandbox."""
        return await _answer(lambda: anyio.to_thread.run_sync(self._live().user, name))

    async def as_user(self, user: User, operation: Callable[[str], T]) -> Answer:
        """`operation(root)` on the sandbox's files with `user`'s rights."""
        sandbox = self._live()
        return await _answer(lambda: anyio.to_thread.run_sync(sandbox.as_user, user, operation))

    async def ended(self) -> None:
        """Return once the sandbox's PID 1 has ended (or the sandbox is being closed)."""
        wait = (anyio.CancelScope(), anyio.Event())
        self._waits.append(wait)
        try:
            with wait[0]:
                await self._live().ended()
        finally:
            wait[1].set()

    async def close(self) -> Answer:
        """End the sandbox, and remove everything of it and of its host."""

        async def close() -> None:
            # PID 1 is waited for by one task at a time: the close's, now
            for scope, done in self._waits:
                scope.cancel()
                await done.wait()
            if self._sandbox is not None:
                await self._sandbox.close()
            if self._host is not None:
                await self._host.aclose()
                await anyio.to_thread.run_sync(remove_host, self._host)

        return await _answer(close)

    def _live(self) -> Sandbox:
        if self._sandbox is None:
            raise SandboxError("the sandbox was not made")
        return self._sandbox


_relay = ray.remote(SandboxRelay)


def _value(answer: Answer) -> Any:
    ok, value = answer
    if not ok:
        raise value
    return value


class RayProcess:
    """A process of a sandbox on a node, as the server sees it (a `LiveProcess`)."""

    def __init__(self, relay: Any, key: int, pid: int) -> None:
        self._relay = relay
        self.key = key
        self._pid = pid
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
                self._returncode = await self._relay.wait.remote(self.key)
            except ray.exceptions.RayError:
                self._returncode = -9
        return self._returncode

    def signal(self, sig: int) -> None:
        """Signal its process group."""
        self._relay.signal.remote(self.key, sig)

    async def chunks(self, stream: str) -> AsyncIterator[bytes]:
        """Its output on `stream` until its end (or its node's)."""
        while True:
            try:
                chunk: bytes = await self._relay.read.remote(self.key, stream)
            except ray.exceptions.RayError:
                return
            if not chunk:
                return
            yield chunk

    async def write_stdin(self, data: bytes) -> None:
        """Write all of `data` to its stdin."""
        try:
            _value(await self._relay.write_stdin.remote(self.key, data))
        except ray.exceptions.RayError:
            raise BrokenPipeError("the sandbox's node is gone") from None

    def close_stdin(self) -> None:
        """Close its stdin."""
        self._relay.close_stdin.remote(self.key)


class RaySandbox:
    """A long-lived sandbox on a node, as the server sees it (a `LiveSandbox`)."""

    def __init__(self, relay: Any, sandbox_id: str, node: str | None) -> None:
        self._relay = relay
        self.id = sandbox_id
        self._node = node

    def placed(self, node: str) -> None:
        """Ray placed it on `node`."""
        self._node = node

    @property
    def node(self) -> str | None:
        """The node Ray placed it on."""
        return self._node

    async def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        user: User = ROOT,
        stdin: bool = False,
    ) -> RayProcess:
        """Start `argv` in the sandbox, on its node."""
        try:
            key, pid = _value(await self._relay.exec.remote(argv, dict(env), cwd, user, stdin))
        except ray.exceptions.RayError:
            raise SandboxError(self._gone()) from None
        return RayProcess(self._relay, key, pid)

    def forget(self, process: Any) -> None:
        """Let go of a process that exited."""
        self._relay.forget.remote(process.key)

    def user(self, name: str) -> User:
        """A user of the sandbox (blocks)."""
        return self._blocking(self._relay.user.remote(name))  # type: ignore[no-any-return]

    def as_user(self, user: User, operation: Callable[[str], T]) -> T:
        """`operation(root)` on the sandbox's files, on its node, as `user` (blocks)."""
        return self._blocking(self._relay.as_user.remote(user, operation))  # type: ignore[no-any-return]

    async def ended(self) -> str | None:
        """Wait until the sandbox ends on its own, or its node does (which says so)."""
        try:
            await self._relay.ended.remote()
        except ray.exceptions.RayError:
            return f"node lost: {self._node}"
        return None

    async def close(self) -> None:
        """End the sandbox on its node, then its relay (which gives its room back)."""
        # a node gone took the sandbox with it; one that hangs has a while
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(_CLOSE_SECONDS),
            contextlib.suppress(ray.exceptions.RayError),
        ):
            ok, error = await self._relay.close.remote()
            if not ok:
                logger.warning("sandbox %s on node %s: %r", self.id, self._node, error)
        ray.kill(self._relay)

    def _blocking(self, ref: Any) -> Any:
        try:
            return _value(ray.get(ref))
        except ray.exceptions.RayError:
            raise ProcessLookupError(errno.ESRCH, self._gone()) from None

    def _gone(self) -> str:
        return f"sandbox {self.id} is gone with its node {self._node}"


async def place_sandbox(isolation: IsolationConfig, sandbox_id: str, limits: Limits) -> RaySandbox:
    """Have Ray place a sandbox of `limits` on a node with room for it, and make it there
    (SandboxError when it cannot, or no node has had room for a while)."""
    deadline = anyio.current_time() + _PLACE_SECONDS
    died: ray.exceptions.ActorDiedError | None = None
    for _ in range(_PLACE_ATTEMPTS):
        try:
            return await _place(isolation, sandbox_id, limits, deadline)
        except ray.exceptions.ActorDiedError as ex:
            # its node died before the sandbox was made there (Ray had not yet seen it go,
            # and now has): nothing was left on it, and another node may have room
            died = ex
    raise SandboxError(f"the sandbox's node failed it: {died}")


async def _place(
    isolation: IsolationConfig, sandbox_id: str, limits: Limits, deadline: float
) -> RaySandbox:
    """One try of `place_sandbox` (ActorDiedError when its node died first)."""
    relay: Any = _relay.options(  # type: ignore[attr-defined]
        num_cpus=limits.vcpus,
        memory=limits.memory_bytes,
        scheduling_strategy="SPREAD",
        max_concurrency=_CONCURRENCY,
        max_restarts=0,
    ).remote(isolation)
    sandbox = RaySandbox(relay, sandbox_id, None)
    try:
        with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
            sandbox.placed(_value(await relay.create.remote(sandbox_id, limits)))
    except TimeoutError:
        ray.kill(relay)  # still waiting for room: it has made nothing
        raise SandboxError(
            f"no node of the cluster had room for {limits.vcpus} vCPUs and "
            f"{limits.memory_bytes // GIB} GiB for {_PLACE_SECONDS:g}s; end sandboxes or "
            "add nodes"
        ) from None
    except BaseException as ex:
        await sandbox.close()
        if isinstance(ex, ray.exceptions.RayError) and not isinstance(
            ex, ray.exceptions.ActorDiedError
        ):
            raise SandboxError(f"the sandbox's node failed it: {ex}") from None
        raise
    return sandbox
