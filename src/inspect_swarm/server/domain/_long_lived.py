"""Long-lived sandboxes: the server's isolated sandboxes without a command, alive until killed
or timed out, booked against the server's memory and ended with their lease.

The Swarms API's `POST /v1/sandboxes` and the E2B control plane both make them; either way
they are used through the E2B sandbox daemon.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import time
from collections import deque
from dataclasses import dataclass, field

import anyio

from ..engines._engine import Engine, LiveSandbox
from ..model._keys import Owner
from ..model._types import (
    GIB,
    BootFailed,
    HostExhausted,
    Lease,
    LeaseEnded,
    LongLivedRecord,
    SandboxMetric,
    SandboxSpec,
    Size,
    new_sandbox_id,
)
from ..records._store import Store
from ..sandboxes._isolation import SandboxError
from ._leases import Keyring, Leases

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class LongLivedSandbox:
    """One live long-lived sandbox."""

    id: str
    owner: Owner
    """Its account, and the lineage it was made under."""
    lease_id: str
    template: str
    size: Size
    disk_mb: int
    """What its writes may fill, in MiB."""
    metadata: dict[str, str]
    env: dict[str, str]
    """Variables every process gets (the lease's with its own key, E2B's and the create
    call's)."""
    token: str
    """The access token its E2B daemon requires (`X-Access-Token`)."""
    traffic_token: str | None
    """The token a request to one of its ports must carry, if its ports are not public."""
    sandbox: LiveSandbox
    started_at: float
    end_at: float
    scope: anyio.CancelScope
    end_reason: str | None = None
    """Why it was ended, when something ended it before its timeout."""
    ended: anyio.Event = field(default_factory=anyio.Event)
    metrics: deque[SandboxMetric] = field(default_factory=lambda: deque(maxlen=METRICS_KEPT))
    """What it used, sampled every METRICS_SECONDS while it lives, the latest kept."""

    @property
    def ending(self) -> bool:
        """Whether it is being ended (killed, timed out, its lease released) or has ended."""
        return self.scope.cancel_called or self.ended.is_set()

    def record(self) -> LongLivedRecord:
        """Its record, while it is alive."""
        return LongLivedRecord(
            self.id,
            self.owner.account,
            self.owner.lineage,
            self.lease_id,
            self.template,
            self.size,
            self.metadata,
            self.started_at,
            self.end_at,
            node=self.sandbox.node,
        )


class LongLivedSandboxes:
    """The live long-lived sandboxes of one server (a holder of its lease)."""

    def __init__(
        self, store: Store, leases: Leases, keyring: Keyring, engine: Engine, disk_mb: int
    ) -> None:
        self._store = store
        self._disk_mb = disk_mb
        self._leases = leases
        self._keyring = keyring
        self._engine = engine
        self._live: dict[str, LongLivedSandbox] = {}
        leases.hold(self)

    async def start(self, owner: Owner, lease: Lease, spec: SandboxSpec) -> LongLivedSandbox:
        """Boot a sandbox for `owner` on its account's lease.

        It ends `spec.lifetime` seconds from now unless its timeout is set again. Raises
        MemoryFull, LeaseEnded (the lease ended while the sandbox booted) or BootFailed.
        """
        engine, size, lifetime = self._engine, spec.size, spec.lifetime
        engine.book(size)
        self._leases.touch()
        sandbox_id = new_sandbox_id()
        try:
            # a client that gives up mid-boot must not leave a half-made sandbox
            with anyio.CancelScope(shield=True):
                sandbox = await engine.create_sandbox(sandbox_id, size)
        except BaseException as ex:
            engine.unbook(size)  # whatever ended the boot: the memory is not the sandbox's
            if isinstance(ex, SandboxError | OSError):
                raise boot_error(ex) from None
            raise
        current = self._leases.current()
        if current is None or current.id != lease.id:
            with anyio.CancelScope(shield=True):
                await sandbox.close()
            engine.unbook(size)
            raise LeaseEnded("the lease ended while the sandbox booted")
        now = time.time()
        box = LongLivedSandbox(
            id=sandbox_id,
            owner=owner,
            lease_id=lease.id,
            template=spec.template,
            size=size,
            disk_mb=self._disk_mb,
            metadata=dict(spec.metadata),
            env={
                **self._keyring.sandbox_env(lease.id, sandbox_id, owner.lineage),
                "E2B_SANDBOX": "true",
                "E2B_SANDBOX_ID": sandbox_id,
                **spec.env,
            },
            token=secrets.token_urlsafe(24),
            traffic_token=None if spec.public_traffic else secrets.token_urlsafe(24),
            sandbox=sandbox,
            started_at=now,
            end_at=now + lifetime,
            scope=anyio.CancelScope(deadline=anyio.current_time() + lifetime),
        )
        self._live[sandbox_id] = box
        self._store.insert_long_lived(box.record())
        engine.start_soon(self._lifetime, box)
        engine.start_soon(_sample, box)
        return box

    async def _lifetime(self, box: LongLivedSandbox) -> None:
        why: str | None = "server stopped"
        try:
            with box.scope:
                why = await box.sandbox.ended()
            # unless ended by us, its deadline passed or its PID 1 was killed (from outside),
            # or its engine says why (its node was lost)
            why = "timeout" if box.scope.cancelled_caught else why or "init ended"
        finally:
            with anyio.CancelScope(shield=True):
                del self._live[box.id]
                self._keyring.revoke(box.id)
                try:
                    await box.sandbox.close()
                except Exception:
                    # its end is recorded all the same: kill() waits on it
                    logger.exception("sandbox %s did not close cleanly", box.id)
                self._engine.unbook(box.size)
                ended = {"ended_at": time.time(), "end_reason": box.end_reason or why}
                self._store.update_long_lived(box.id, ended)
                box.ended.set()

    def live(self, sandbox_id: str, owner: Owner | None = None) -> LongLivedSandbox | None:
        """A live sandbox (within `owner`'s reach, when given)."""
        box = self._live.get(sandbox_id)
        if box is None or (owner is not None and not _reaches(owner, box)):
            return None
        return box

    def record(self, sandbox_id: str, owner: Owner) -> LongLivedRecord | None:
        """The record of a sandbox within `owner`'s reach, alive or ended (None if unknown)."""
        return self._store.long_lived(sandbox_id, owner)

    def of_all(self) -> list[LongLivedSandbox]:
        """Every live sandbox, whoever's."""
        return list(self._live.values())

    def of(self, owner: Owner) -> list[LongLivedSandbox]:
        """The live sandboxes within `owner`'s reach, oldest first."""
        return [box for box in self._live.values() if _reaches(owner, box)]

    async def kill(self, box: LongLivedSandbox) -> None:
        """End a sandbox and wait until it is gone."""
        self._end(box, "killed")
        await box.ended.wait()

    def set_timeout(self, box: LongLivedSandbox, timeout: int) -> None:
        """End the sandbox `timeout` seconds from now."""
        box.end_at = time.time() + timeout
        box.scope.deadline = anyio.current_time() + timeout
        self._store.update_long_lived(box.id, {"end_at": box.end_at})

    def holds(self, lease_id: str) -> bool:
        """Whether a sandbox on the lease is alive."""
        return any(box.lease_id == lease_id for box in self._live.values())

    def release(self, lease_id: str, reason: str) -> None:
        """End every sandbox on the lease (their tasks clean up)."""
        for box in self._live.values():
            if box.lease_id == lease_id:
                self._end(box, reason)

    @staticmethod
    def _end(box: LongLivedSandbox, reason: str) -> None:
        box.end_reason = box.end_reason or reason
        box.scope.cancel()


METRICS_SECONDS = 5.0
"""How often a live sandbox's use of its resources is sampled (as E2B's)."""
METRICS_KEPT = 4320
"""The most samples a sandbox keeps: 6 hours' worth, its longest life."""


async def _sample(box: LongLivedSandbox) -> None:
    """Sample what the sandbox uses until it ends (or can no longer be read)."""
    before = (box.started_at, 0.0)
    while not box.ending:
        try:
            used = await anyio.to_thread.run_sync(box.sandbox.usage)
        except OSError:  # its cgroups or disk went with it
            return
        now = time.time()
        busy = (used.cpu_seconds - before[1]) / max(now - before[0], 1e-3) / box.size.vcpus
        before = (now, used.cpu_seconds)
        metric = SandboxMetric(
            now,
            box.size.vcpus,
            round(min(max(busy, 0.0), 1.0) * 100, 2),
            used.memory,
            box.size.memory_gb * GIB,
            used.cache,
            used.disk,
            used.disk_total,
        )
        box.metrics.append(metric)
        with anyio.move_on_after(METRICS_SECONDS):
            await box.ended.wait()


def _reaches(owner: Owner, box: LongLivedSandbox) -> bool:
    return owner.owns(box.owner.account, box.owner.lineage)


_SHORTAGES = {
    errno.ENOMEM: "memory",
    errno.ENOSPC: "disk space",
    errno.EDQUOT: "disk space",
    errno.EMFILE: "open files",
    errno.ENFILE: "open files",
    errno.EAGAIN: "processes",
}
"""The errors that say this machine lacks a resource, and which."""


def boot_error(ex: SandboxError | OSError) -> BootFailed | HostExhausted:
    """Why a boot failed: HostExhausted naming the resource this machine lacked (the errno of
    an OSError, or its words in a sandbox's PID 1's report), else BootFailed."""
    text = str(ex)
    for number, resource in _SHORTAGES.items():
        if (isinstance(ex, OSError) and ex.errno == number) or os.strerror(number) in text:
            return HostExhausted(resource, text)
    return BootFailed(f"sandbox boot failed: {text}")
