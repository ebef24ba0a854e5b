"""Snapshots of long-lived sandboxes: their files copied aside (memory is not kept), owned by
the account that made them, counted against the disk its snapshots may take, and kept until
deleted, past the end of the sandbox they were made of and the server's (each a row of the
store, its copy on the engine), or until the engine loses them (a node of a cluster that left
took its snapshots with it).
"""

from __future__ import annotations

import errno
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from ..engines._engine import Engine
from ..model._keys import Owner
from ..model._types import (
    BootFailed,
    NotFound,
    SnapshotCapReached,
    SnapshotFailed,
    SnapshotRecord,
    SnapshotUnavailable,
    new_snapshot_id,
)
from ..records._store import Store
from ..sandboxes._isolation import SandboxError
from ..sandboxes._snapshots import SnapshotTooLarge
from ._long_lived import LongLivedSandbox, LongLivedSandboxes

_MIB = 1024**2


class Snapshots:
    """The snapshots of one server, each account's within its cap."""

    def __init__(
        self, store: Store, engine: Engine, sandboxes: LongLivedSandboxes, cap_mb: int
    ) -> None:
        self._store = store
        self._engine = engine
        self._sandboxes = sandboxes
        self._cap = cap_mb * _MIB
        self._kept = {snapshot.id: snapshot for snapshot in store.snapshots()}
        # the copies of those recorded stay; the rest (a copy cut short, one deleted while
        # lent) went with the server that made them
        engine.keep_snapshots({snapshot.storage for snapshot in self._kept.values()})
        self._gone: dict[str, tuple[SnapshotRecord, str]] = {}
        """The snapshots the engine lost, and why: a sandbox made from one says so."""
        self._copying: defaultdict[str, anyio.Lock] = defaultdict(anyio.Lock)
        self._lent: Counter[str] = Counter()
        """How many boots read each copy now."""
        self._dropped: set[str] = set()
        """Copies deleted while lent, removed once their boots are done."""

    async def take(self, box: LongLivedSandbox, owner: Owner, name: str | None) -> SnapshotRecord:
        """Snapshot a sandbox for `owner`; a snapshot of `owner`'s of the same name is
        replaced (its id kept). Raises SnapshotCapReached, SnapshotUnavailable or
        SnapshotFailed."""
        replaced = None if name is None else self.find(name, owner)
        storage, taken = await self._copy(box, owner)
        record = SnapshotRecord(
            id=new_snapshot_id() if replaced is None else replaced.id,
            account=owner.account,
            lineage=owner.lineage,
            name=name,
            sandbox_id=box.id,
            template=box.template,
            created_at=time.time(),
            bytes=taken,
            storage=storage,
        )
        self._kept[record.id] = record
        self._store.put_snapshot(record)
        if replaced is not None:
            await self._drop(replaced.storage)
        return record

    @asynccontextmanager
    async def lent(self, snapshot: SnapshotRecord | None) -> AsyncIterator[str | None]:
        """The copy of `snapshot` (None for none), kept while the block boots a sandbox
        from it, even if the snapshot is deleted meanwhile; a boot that failed as the engine
        lost the copy is NotFound, saying why."""
        if snapshot is None:
            yield None
            return
        storage = snapshot.storage
        self._lent[storage] += 1
        try:
            yield storage
        except BootFailed:
            self._prune()
            if snapshot.id in self._gone:
                raise self._gone_error(snapshot.id) from None
            raise
        finally:
            self._lent -= Counter({storage: 1})  # a count that reaches 0 goes
            if storage in self._dropped:
                await self._drop(storage)

    async def _copy(self, box: LongLivedSandbox, owner: Owner) -> tuple[str, int]:
        """Copy a sandbox's files aside on its engine, within the cap of `owner`'s account;
        its storage and bytes. An account's copies are made one at a time, each sized
        before it is made: its snapshots never take more than the cap, even for a moment."""
        account = owner.account
        async with self._copying[account]:
            used = self._used(account)
            storage = new_snapshot_id()
            try:
                return storage, await self._sandboxes.save(box, storage, self._cap - used)
            except SnapshotTooLarge as ex:
                raise SnapshotCapReached(
                    f"snapshots: your account's take {_mib(used)} of {_mib(self._cap)}, and "
                    f"sandbox {box.id!r} has {_mib(ex.size)} of files to copy; delete "
                    "snapshots you no longer need (Sandbox.delete_snapshot)"
                ) from None
            except SandboxError as ex:
                raise SnapshotUnavailable(str(ex)) from None
            except OSError as ex:
                short = " (this machine's disk is full)" if ex.errno == errno.ENOSPC else ""
                raise SnapshotFailed(
                    f"snapshot of sandbox {box.id!r} failed{short}: {ex.strerror or ex}; "
                    "delete snapshots or try again later"
                ) from None

    def _used(self, account: str) -> int:
        self._prune()
        return sum(s.bytes for s in self._kept.values() if s.account == account)

    def find(self, name_or_id: str, owner: Owner) -> SnapshotRecord | None:
        """`owner`'s snapshot of that id, or its newest of that name (NotFound, saying why,
        for one the engine lost)."""
        self._prune()
        found = self._kept.get(name_or_id)
        if found is not None and owner.owns(found.account, found.lineage):
            return found
        lost = self._gone.get(name_or_id, (None, ""))[0]
        if lost is not None and owner.owns(lost.account, lost.lineage):
            raise self._gone_error(name_or_id)
        named = [s for s in self.of(owner) if s.name == name_or_id]
        return named[-1] if named else None

    def _gone_error(self, snapshot_id: str) -> NotFound:
        why = self._gone[snapshot_id][1]
        return NotFound(f"snapshot {snapshot_id!r} is gone: {why}; make a new one")

    def _prune(self) -> None:
        """Forget the snapshots the engine lost (their node left the cluster): no longer
        listed nor counted against the cap."""
        for snapshot in list(self._kept.values()):
            why = self._engine.snapshot_lost(snapshot.storage)
            if why is not None:
                del self._kept[snapshot.id]
                self._store.delete_snapshot(snapshot.id)
                self._gone[snapshot.id] = (snapshot, why)

    def of(self, owner: Owner, sandbox_id: str | None = None) -> list[SnapshotRecord]:
        """The snapshots within `owner`'s reach (of the sandbox `sandbox_id` when given),
        oldest first."""
        self._prune()
        return [
            s
            for s in self._kept.values()
            if owner.owns(s.account, s.lineage) and sandbox_id in (None, s.sandbox_id)
        ]

    async def delete(self, snapshot_id: str, owner: Owner) -> bool:
        """Delete `owner`'s snapshot of that id; whether there was one."""
        found = self._kept.get(snapshot_id)
        if found is None or not owner.owns(found.account, found.lineage):
            return False
        del self._kept[snapshot_id]
        self._store.delete_snapshot(snapshot_id)
        await self._drop(found.storage)
        return True

    async def _drop(self, storage: str) -> None:
        """Remove a copy from the engine, or once no boot reads it."""
        if self._lent[storage] > 0:
            self._dropped.add(storage)
            return
        self._dropped.discard(storage)
        with anyio.CancelScope(shield=True):
            await self._engine.drop_snapshot(storage)


def _mib(size: int) -> str:
    return f"{size / _MIB:.1f} MiB"
