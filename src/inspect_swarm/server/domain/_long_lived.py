"""Long-lived sandboxes: the server's isolated sandboxes without a command, alive until killed
or timed out, booked against the server's memory and ended with their lease.

The Swarms API's `POST /v1/sandboxes` and the E2B control plane both make them; either way
they are used through the E2B sandbox daemon.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from ..engines._engine import Engine, LiveSandbox, Origin
from ..model._keys import Owner
from ..model._types import (
    GIB,
    BootFailed,
    Egress,
    HostExhausted,
    Lease,
    LeaseEnded,
    LongLivedRecord,
    PauseUnavailable,
    SandboxMetric,
    SandboxSpec,
    SandboxState,
    Size,
    new_sandbox_id,
)
from ..records._store import Store
from ..sandboxes._isolation import SandboxError
from ..sandboxes._network import Outbound
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
    asked_env: dict[str, str]
    """The create call's own variables (in `env`), which a fork of it gets too."""
    egress: Egress
    """What its way out was asked to be, which its forks and the sandboxes it makes get."""
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
    pause_on_timeout: bool = False
    """Whether its timeout pauses it rather than ends it."""
    paused_at: float | None = None
    """When it was paused (its processes frozen), while it is."""
    changing: anyio.Lock = field(default_factory=anyio.Lock)
    """Held while it is paused or resumed."""
    metrics: deque[SandboxMetric] = field(default_factory=lambda: deque(maxlen=METRICS_KEPT))
    """What it used, sampled every METRICS_SECONDS while it lives, the latest kept."""

    @property
    def ending(self) -> bool:
        """Whether it is being ended (killed, timed out, its lease released) or has ended."""
        return self.scope.cancel_called or self.ended.is_set()

    @property
    def state(self) -> str:
        """`paused` while its processes are frozen, else `running`."""
        return "running" if self.paused_at is None else "paused"

    def forked(self, lifetime: int) -> SandboxSpec:
        """A sandbox made as this one was, to live `lifetime` seconds."""
        return SandboxSpec(
            self.template,
            self.size,
            lifetime,
            self.metadata,
            self.asked_env,
            pause_on_timeout=self.pause_on_timeout,
            public_traffic=self.traffic_token is None,
            egress=self.egress,
        )

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

    async def start(
        self,
        owner: Owner,
        lease: Lease,
        spec: SandboxSpec,
        outbound: Outbound | None,
        files: Origin = None,
    ) -> LongLivedSandbox:
        """Boot a sandbox for `owner` on its account's lease, with the `files` of an
        engine's snapshot or of a frozen sandbox if given, routed out under `outbound`
        (None: no way out).

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
                sandbox = await engine.create_sandbox(sandbox_id, size, outbound, files)
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
            asked_env=dict(spec.env),
            egress=spec.egress,
            token=secrets.token_urlsafe(24),
            traffic_token=None if spec.public_traffic else secrets.token_urlsafe(24),
            sandbox=sandbox,
            started_at=now,
            end_at=now + lifetime,
            scope=anyio.CancelScope(deadline=anyio.current_time() + lifetime),
            pause_on_timeout=spec.pause_on_timeout,
        )
        self._live[sandbox_id] = box
        self._store.insert_long_lived(box.record())
        engine.start_soon(self._lifetime, box)
        engine.start_soon(_sample, box)
        return box

    async def _lifetime(self, box: LongLivedSandbox) -> None:
        why: str | None = "server stopped"
        try:
            while True:
                with box.scope:
                    why = await box.sandbox.ended()
                if not (await self._paused_on_timeout(box)):
                    break
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

    async def _paused_on_timeout(self, box: LongLivedSandbox) -> bool:
        """Pause a sandbox whose timeout passed, if it asked for that; whether it lives on."""
        if not (box.scope.cancelled_caught and box.end_reason is None and box.pause_on_timeout):
            return False
        timed_out, box.scope = box.scope, anyio.CancelScope()  # a kill from here ends it
        try:
            await self.pause(box)
        except SandboxState:
            pass  # paused by its owner as its timeout passed
        except PauseUnavailable:
            logger.warning("sandbox %s could not pause on its timeout: ended", box.id)
            box.scope = timed_out
            return False
        return True

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

    async def pause(self, box: LongLivedSandbox) -> None:
        """Freeze every process of the sandbox, memory kept: it uses no CPU and its timeout
        stops until `resume` (SandboxState if it is paused already, PauseUnavailable if its
        cgroups have no freezer)."""
        async with box.changing:
            if box.paused_at is not None:
                raise SandboxState(f"sandbox {box.id!r} is paused already")
            await _freeze(box, True)
            box.paused_at = time.time()
            box.scope.deadline = math.inf

    async def resume(self, box: LongLivedSandbox, lifetime: int) -> bool:
        """Thaw a paused sandbox, to end `lifetime` seconds from now; False (and nothing done)
        if it was running."""
        async with box.changing:
            if box.paused_at is None:
                return False
            await _freeze(box, False)
            box.paused_at = None
            self.set_timeout(box, lifetime)
            return True

    async def save(self, box: LongLivedSandbox, storage: str, most: int) -> int:
        """Copy the sandbox's files aside as the engine's snapshot `storage` if they take at
        most `most` bytes, of one moment; the bytes it takes."""
        async with self.still(box):
            return await box.sandbox.save(storage, most)

    @asynccontextmanager
    async def still(self, box: LongLivedSandbox) -> AsyncIterator[None]:
        """The sandbox's processes frozen while the block runs (unless paused already), so
        that what it copies of the files is of one moment; shielded, as the sandbox must
        not stay frozen."""
        async with box.changing:
            running = box.paused_at is None
            if running:
                await _freeze(box, True)
            try:
                with anyio.CancelScope(shield=True):
                    yield
            finally:
                if running:
                    await _freeze(box, False)

    def set_timeout(self, box: LongLivedSandbox, timeout: int) -> None:
        """End the sandbox `timeout` seconds from now (SandboxState while it is paused)."""
        if box.paused_at is not None:
            raise SandboxState(
                f"sandbox {box.id!r} is paused and has no timeout: connect to it to resume it"
            )
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


async def _freeze(box: LongLivedSandbox, frozen: bool) -> None:
    # half done, a freeze would leave the sandbox neither paused nor running
    with anyio.CancelScope(shield=True):
        try:
            await box.sandbox.freeze(frozen)
        except OSError as ex:
            raise PauseUnavailable(
                f"sandbox {box.id!r} cannot be {'paused' if frozen else 'resumed'}: "
                f"{ex.strerror or ex} (pausing needs the cgroup freezer, cgroups v1 or v2)"
            ) from None


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
