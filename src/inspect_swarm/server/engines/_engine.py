"""What the domain asks of an engine: to run runs' sandboxes, to book memory and make sandboxes
for those outside runs, and to end what a lease held.

The engine that runs sandboxes on this machine (`engines._local`) is one; another, on other
machines, plugs in by doing the same. An engine writes what happens to runs and their
sandboxes through `Runs`, and asks the domain for each sandbox's variables (with a key of its
own) through its `SandboxCredentials` (the domain's `Keyring`).

A sandbox outside runs is used through `LiveSandbox` and its processes through `LiveProcess`:
the local engine's are this machine's (`sandboxes._isolation`); an engine of many machines gives
stand-ins that relay each operation to the node holding the sandbox.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import anyio.abc

from ..model._types import RunRecord, Size
from ..sandboxes._cgroups import Usage
from ..sandboxes._isolation import User
from ..sandboxes._network import Outbound
from ..sandboxes._terminal import TerminalSize
from ..sandboxes._watch import Change

T = TypeVar("T")


class LiveProcess(Protocol):
    """A process started in a sandbox outside runs, with pipes (stdin when asked for)."""

    @property
    def pid(self) -> int:
        """Its pid, as seen inside the sandbox."""
        ...

    @property
    def returncode(self) -> int | None:
        """Its exit status once waited for (negative: killed by that signal)."""
        ...

    async def wait(self) -> int:
        """Wait until it exits (any number of tasks may wait)."""
        ...

    def signal(self, sig: int) -> None:
        """Signal its whole process group."""
        ...

    def chunks(self, stream: str) -> AsyncIterator[bytes]:
        """Its output on `stream` ("stdout" or "stderr") until end of file."""
        ...

    async def write_stdin(self, data: bytes) -> None:
        """Write all of `data` to its stdin (BrokenPipeError once that is closed)."""
        ...

    def close_stdin(self) -> None:
        """Close its stdin, so it reads end of file."""
        ...

    def resize(self, size: TerminalSize) -> None:
        """Resize its terminal (ValueError if it was started without one)."""
        ...


class LiveWatch(Protocol):
    """A watch of a directory of a sandbox outside runs."""

    def changes(self) -> AsyncIterator[list[Change]]:
        """Batches of changes as they happen, until the directory or the sandbox is gone."""
        ...

    def close(self) -> None:
        """Stop watching."""
        ...


class LiveSandbox(Protocol):
    """A sandbox outside runs, wherever its engine made it."""

    @property
    def node(self) -> str | None:
        """The node of the engine's cluster it is on (None on an engine of one machine)."""
        ...

    async def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        user: User = ...,
        stdin: bool = False,
        terminal: TerminalSize | None = None,
    ) -> LiveProcess:
        """Start `argv` in the sandbox, on a terminal of that size if given (its output all
        on stdout); SandboxError once the sandbox has ended."""
        ...

    def forget(self, process: Any) -> None:
        """Let go of a process that has exited."""
        ...

    def usage(self) -> Usage:
        """What the sandbox uses now (OSError or ProcessLookupError once it is gone); blocks."""
        ...

    async def watch(self, user: User, path: str, recursive: bool) -> LiveWatch:
        """Watch a directory of the sandbox as `user` (OSError as a file call's)."""
        ...

    async def freeze(self, frozen: bool) -> None:
        """Freeze (or thaw) every process of the sandbox, memory kept; OSError where it
        cannot be frozen."""
        ...

    async def save(self, snapshot_id: str, most: int) -> int:
        """Copy the sandbox's files aside as the snapshot `snapshot_id`, where it is, its
        processes frozen by the caller; the bytes the snapshot takes. SnapshotTooLarge when
        they take more than `most` bytes (nothing copied), SandboxError where the sandbox
        has no disk of its own, OSError when the copy fails."""
        ...

    def user(self, name: str) -> User:
        """A user of the sandbox's /etc/passwd (SandboxError for none); blocks."""
        ...

    def dial(self, port: int) -> socket.socket:
        """A TCP connection to `port` on the sandbox's own loopback, for forwarding a port;
        blocks (on an engine of many machines, a connection its node relays). SandboxError
        when the sandbox shares the host's network; ConnectionRefusedError when nothing
        listens."""
        ...

    def as_user(self, user: User, operation: Callable[[str], T]) -> T:
        """`operation(root)` on the sandbox's files with `user`'s rights; blocks."""
        ...

    async def ended(self) -> str | None:
        """Wait until the sandbox ends on its own; why, when it is not its PID 1's end."""
        ...

    async def close(self) -> None:
        """End the sandbox and remove everything of it."""
        ...


Origin = str | LiveSandbox | None
"""What a new sandbox's files start as: the template's (None), a snapshot that a sandbox's
`save` made (its id), or a live sandbox's as they are now (a fork: its processes frozen by
the caller, its files copied once, straight onto the new sandbox's disk)."""


class SandboxCredentials(Protocol):
    """The keys and variables of the sandboxes an engine starts."""

    def sandbox_env(self, lease_id: str, sandbox_id: str, lineage: str) -> dict[str, str]:
        """The variables of a sandbox on the lease, made under `lineage`, with a new key of
        its own (it works until `revoke`)."""
        ...

    def revoke(self, sandbox_id: str) -> None:
        """The sandbox has ended: its key stops working."""
        ...


class Engine(Protocol):
    """Runs sandboxes for the server's runs, and makes sandboxes for the rest."""

    @property
    def max_running(self) -> int:
        """The most sandboxes that have run at once."""
        ...

    @property
    def booked_gb(self) -> int:
        """The memory booked by the sandboxes running now, in GB."""
        ...

    @property
    def running(self) -> int:
        """How many sandboxes run now."""
        ...

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the scheduler until cancelled (`task_status` once it takes work); an error in
        the scheduler itself is raised (one in a sandbox's task ends that task alone)."""
        ...

    def submit(self, run: RunRecord, queued: list[int]) -> None:
        """Run the sandboxes of `run` at these input indexes, first in first out."""
        ...

    def cancel(self, run_id: str) -> None:
        """Cancel a run: queued sandboxes never start, running ones stop."""
        ...

    def holds(self, lease_id: str) -> bool:
        """Whether a run on the lease is unfinished."""
        ...

    def end_lease(self, lease_id: str, error: str) -> None:
        """Fail every unfinished run on the lease with `error` (its running sandboxes stop)."""
        ...

    def book(self, size: Size) -> None:
        """Book memory for a sandbox outside a run (MemoryFull when it does not fit now)."""
        ...

    def unbook(self, size: Size) -> None:
        """Give back what `book` took."""
        ...

    async def create_sandbox(
        self, sandbox_id: str, size: Size, outbound: Outbound | None, files: Origin = None
    ) -> LiveSandbox:
        """Make a sandbox outside a run, on memory booked for it, placed by `size` where the
        engine has several machines (on the machine holding its `files`, when given), with
        those files, routed out under `outbound` (None: no way out) (SandboxError or OSError
        when it cannot)."""
        ...

    def snapshot_lost(self, snapshot_id: str) -> str | None:
        """Why a snapshot a sandbox's `save` made is gone (its machine left the engine's
        cluster, say), or None while the engine holds it."""
        ...

    async def drop_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot a sandbox's `save` made."""
        ...

    def keep_snapshots(self, snapshot_ids: Collection[str]) -> None:
        """Remove every snapshot a sandbox's `save` made but these (as the server starts:
        those recorded); blocks, or does it in the background before any sandbox is made
        from one."""
        ...

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task beside the scheduler, ended with it (an error ends that task alone)."""
        ...

    async def aclose(self) -> None:
        """End every sandbox and give back what the engine holds of the machine."""
        ...
