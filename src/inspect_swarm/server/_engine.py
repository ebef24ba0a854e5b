"""What the domain asks of an engine: to run runs' sandboxes, to book memory and make sandboxes
for those outside runs, and to end what a lease held.

The engine that runs sandboxes on this machine (`_local_engine`) is one; another, on other
machines, plugs in by doing the same. An engine writes what happens to runs and their
sandboxes through `Runs`, and asks the domain for each sandbox's variables (with a key of its
own) through its `SandboxCredentials` (the domain's `Keyring`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

import anyio.abc

from ._isolation import Sandbox
from ._model import RunRecord, Size


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
    def isolation(self) -> Mapping[str, object]:
        """The isolation its sandboxes have, as the API reports it."""
        ...

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

    async def create_sandbox(self, sandbox_id: str, size: Size) -> Sandbox:
        """Make a sandbox outside a run, on memory booked for it (SandboxError or OSError
        when it cannot)."""
        ...

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task beside the scheduler, ended with it (an error ends that task alone)."""
        ...

    async def aclose(self) -> None:
        """End every sandbox and give back what the engine holds of the machine."""
        ...
