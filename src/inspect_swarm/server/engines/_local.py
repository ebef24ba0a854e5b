"""The slot runner of this machine: each slot holds an isolated sandbox here
(`sandboxes._isolation`), which runs the commands of its run's sandboxes in turn, made anew
for each where it can be.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from functools import partial

import anyio.abc

from .._defaults import machine_memory_bytes
from ..model._types import Outcome, Size
from ..sandboxes._isolation import Sandbox, SandboxHost
from ..sandboxes._network import Outbound
from ._command import Capacity, Slot, limits, run_in_slot
from ._engine import LiveSandbox, Origin
from ._scheduler import Turn


class LocalRunner:
    """Runs the sandboxes of one server on this machine (a `SlotRunner` of `Slot`s)."""

    def __init__(self, host: SandboxHost, machine: Capacity | None = None) -> None:
        self._host = host
        self._machine = machine or this_machine()
        host.reap_leftovers()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Nothing to keep up: this machine stays as it is."""
        task_status.started()

    def unfit(self, size: Size) -> str | None:
        """Why this machine cannot hold a sandbox of `size` (None when it can)."""
        return None if self._machine.holds(size) else self._machine.too_small(size, "this machine")

    def new_slot(self) -> Slot:
        """A slot that boots its sandbox as it runs its first."""
        return Slot()

    async def run(self, slot: Slot, turn: Turn) -> Outcome:
        """Run the sandbox of `turn` in the slot's sandbox made anew, or a new one."""
        boot = partial(self._host.create, limits=limits(turn.command.spec.size))
        return await run_in_slot(slot, boot, turn.sandbox_id, turn.command, turn.more)

    async def end_slot(self, slot: Slot) -> None:
        """End the sandbox the slot kept for the run's next."""
        await slot.close()

    async def create_sandbox(
        self, sandbox_id: str, size: Size, outbound: Outbound | None, files: Origin = None
    ) -> LiveSandbox:
        """Boot a sandbox outside a run, with the files of a snapshot or a sandbox of this
        machine's if given."""
        assert files is None or isinstance(files, str | Sandbox), "the local engine's own"
        return await self._host.create(sandbox_id, limits(size), files, outbound)

    def snapshot_lost(self, snapshot_id: str) -> str | None:
        """None: this machine keeps its snapshots until they are dropped."""
        return None

    async def drop_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot of this machine's."""
        await self._host.drop_snapshot(snapshot_id)

    def keep_snapshots(self, snapshot_ids: Collection[str]) -> None:
        """Remove every snapshot of this machine's but these."""
        self._host.keep_snapshots(snapshot_ids)

    async def aclose(self) -> None:
        """End every sandbox, and remove the server's cgroups."""
        await self._host.aclose()
        self._host.cgroups.remove_base()


def this_machine() -> Capacity:
    """The CPUs this process may run on, and the machine's memory."""
    return Capacity(len(os.sched_getaffinity(0)), machine_memory_bytes())
