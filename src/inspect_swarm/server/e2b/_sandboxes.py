"""Long-lived sandboxes: the server's isolated sandboxes without a command, alive until
killed or timed out, booked against the server's memory and ended with their lease.

Both the E2B control plane and the Swarms API's `POST /v1/sandboxes` make them (through
`E2BSandboxes.start`); either way they are used through the E2B sandbox daemon.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .._cgroups import Limits
from .._engine import GIB, Engine, _sandbox_id
from .._isolation import Sandbox, SandboxError
from .._keys import Owner
from .._schema import TEMPLATES, ApiError, Size
from .._views import iso, long_lived_object

if TYPE_CHECKING:
    from ._process_service import Command

ENVD_VERSION = "0.5.7"
"""The envd protocol version this server speaks (gates the SDK's features)."""
ENVD_PORT = 49983
E2B_SIZE = Size(vcpus=2, memoryGb=1)
"""What one sandbox made through E2B books and may use (E2B's default template has 512 MiB)."""
DEFAULT_TIMEOUT = 300


class E2BError(Exception):
    """An error answered in E2B's shape, `{"code": status, "message": ...}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class E2BSandbox:
    """One live E2B sandbox."""

    id: str
    owner: Owner
    """Its account, and the lineage it was made under."""
    lease_id: str
    template: str
    size: Size
    metadata: dict[str, str]
    env: dict[str, str]
    """Variables every process gets (the lease's with its own key, E2B's and the create
    call's)."""
    token: str
    """The envd access token the daemon side requires (`X-Access-Token`)."""
    sandbox: Sandbox
    started_at: float
    end_at: float
    scope: anyio.CancelScope
    end_reason: str | None = None
    """Why it was ended, when something ended it before its timeout."""
    ended: anyio.Event = field(default_factory=anyio.Event)
    commands: dict[int, Command] = field(default_factory=dict)

    def created(self) -> dict[str, Any]:
        """The create and connect answer."""
        return {
            "templateID": self.template,
            "sandboxID": self.id,
            "clientID": "local",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.token,
            "domain": None,
        }

    def listed(self) -> dict[str, Any]:
        """The list and get answer."""
        return {
            "templateID": self.template,
            "sandboxID": self.id,
            "clientID": "local",
            "startedAt": iso(self.started_at),
            "endAt": iso(self.end_at),
            "cpuCount": self.size.vcpus,
            "memoryMB": self.size.memoryGb * 1024,
            "diskSizeMB": 12 * 1024,
            "state": "running",
            "envdVersion": ENVD_VERSION,
            "metadata": self.metadata,
        }

    def record(self) -> dict[str, Any]:
        """Its record in the store (a `long_lived` row, while it is alive)."""
        return {
            "sandbox_id": self.id,
            "account": self.owner.account,
            "lineage": self.owner.lineage,
            "lease_id": self.lease_id,
            "template": self.template,
            "vcpus": self.size.vcpus,
            "memory_gb": self.size.memoryGb,
            "metadata": json.dumps(self.metadata),
            "started_at": self.started_at,
            "end_at": self.end_at,
            "ended_at": None,
            "end_reason": None,
        }


class E2BSandboxes:
    """The live long-lived sandboxes of one server."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._live: dict[str, E2BSandbox] = {}
        engine.holders.append(self)

    async def create(
        self,
        owner: Owner,
        template: str,
        lifetime: int,
        metadata: dict[str, str],
        env: dict[str, str],
    ) -> E2BSandbox:
        """Boot a sandbox for the E2B control plane, with its errors in E2B's shape."""
        if template not in TEMPLATES:
            raise E2BError(
                404, f"template {template!r} not found; this server has {', '.join(TEMPLATES)}"
            )
        self._check_timeout(lifetime)
        try:
            return await self.start(owner, template, E2B_SIZE, lifetime, metadata, env)
        except ApiError as ex:
            raise E2BError(ex.status, ex.detail) from None

    async def start(
        self,
        owner: Owner,
        template: str,
        size: Size,
        lifetime: int,
        metadata: dict[str, str],
        env: dict[str, str],
    ) -> E2BSandbox:
        """Boot a sandbox for `owner` on its account's lease (made if the server is free).

        It ends `lifetime` seconds from now unless its timeout is set again. Raises ApiError:
        `server_busy`, `plan_required`, `memory_full`, `lease_ended` (the lease ended while
        the sandbox booted) or `boot_failed`.
        """
        engine = self.engine
        lease, _ = engine.lease(owner.account)
        engine.book(size.memoryGb)
        sandbox_id = _sandbox_id()
        try:
            # a client that gives up mid-boot must not leave a half-made sandbox
            with anyio.CancelScope(shield=True):
                sandbox = await engine.host.create(
                    sandbox_id, Limits(size.memoryGb * GIB, size.vcpus)
                )
        except (SandboxError, OSError) as ex:
            engine.unbook(size.memoryGb)
            raise ApiError(500, "boot_failed", f"sandbox boot failed: {ex}") from None
        current = engine.store.open_lease()
        if current is None or current.id != lease.id:
            with anyio.CancelScope(shield=True):
                await sandbox.close()
            engine.unbook(size.memoryGb)
            raise ApiError(409, "lease_ended", "the lease ended while the sandbox booted")
        now = time.time()
        box = E2BSandbox(
            id=sandbox_id,
            owner=owner,
            lease_id=lease.id,
            template=template,
            size=size,
            metadata=metadata,
            env={
                **engine.lease_env(lease, engine.sandbox_key(lease, sandbox_id, owner.lineage)),
                "E2B_SANDBOX": "true",
                "E2B_SANDBOX_ID": sandbox_id,
                **env,
            },
            token=secrets.token_urlsafe(24),
            sandbox=sandbox,
            started_at=now,
            end_at=now + lifetime,
            scope=anyio.CancelScope(deadline=anyio.current_time() + lifetime),
        )
        self._live[sandbox_id] = box
        engine.store.insert_long_lived(box.record())
        engine.start_soon(self._lifetime, box)
        return box

    def _check_timeout(self, timeout: int) -> None:
        most = self.engine.settings.max_timeout
        if not 1 <= timeout <= most:
            raise E2BError(400, f"timeout must be 1 to {most} seconds, got {timeout}")

    async def _lifetime(self, box: E2BSandbox) -> None:
        why = "server stopped"
        try:
            with box.scope:
                await box.sandbox.ended()
            # unless ended by us, its deadline passed or its PID 1 was killed (from outside)
            why = "timeout" if box.scope.cancelled_caught else "init ended"
        finally:
            with anyio.CancelScope(shield=True):
                del self._live[box.id]
                self.engine.revoke_sandbox_key(box.id)
                await box.sandbox.close()
                self.engine.unbook(box.size.memoryGb)
                self.engine.store.update_long_lived(
                    box.id, ended_at=time.time(), end_reason=box.end_reason or why
                )
                box.ended.set()

    def live(self, sandbox_id: str, owner: Owner | None = None) -> E2BSandbox | None:
        """A live sandbox (within `owner`'s reach, when given)."""
        box = self._live.get(sandbox_id)
        if box is None or (owner is not None and not _reaches(owner, box)):
            return None
        return box

    def get(self, sandbox_id: str, owner: Owner | None = None) -> E2BSandbox:
        """A live sandbox (within `owner`'s reach, when given), else 404."""
        box = self.live(sandbox_id, owner)
        if box is None:
            raise E2BError(404, f"sandbox {sandbox_id!r} not found")
        return box

    def describe(self, box: E2BSandbox) -> dict[str, Any]:
        """A live sandbox as `/v1/sandboxes` shows it, with what its E2B daemon needs.

        That is the daemon's address (one for every sandbox, routed by `E2b-Sandbox-Id`), its
        envd version and the sandbox's access token.
        """
        access = {
            "envdUrl": self.engine.url,
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": box.token,
        }
        return long_lived_object(box.record(), access)

    def lookup(self, sandbox_id: str, owner: Owner) -> dict[str, Any] | None:
        """A sandbox within `owner`'s reach as `/v1/sandboxes` shows it, alive or ended (None
        if unknown)."""
        box = self.live(sandbox_id, owner)
        if box is not None:
            return self.describe(box)
        row = self.engine.store.long_lived(sandbox_id, owner)
        return None if row is None else long_lived_object(row, None)

    def of(self, owner: Owner) -> list[E2BSandbox]:
        """The live sandboxes within `owner`'s reach, oldest first."""
        return [box for box in self._live.values() if _reaches(owner, box)]

    async def kill(self, box: E2BSandbox) -> None:
        """End a sandbox and wait until it is gone."""
        self._end(box, "killed")
        await box.ended.wait()

    def set_timeout(self, box: E2BSandbox, timeout: int) -> None:
        """End the sandbox `timeout` seconds from now."""
        self._check_timeout(timeout)
        box.end_at = time.time() + timeout
        box.scope.deadline = anyio.current_time() + timeout
        self.engine.store.update_long_lived(box.id, end_at=box.end_at)

    def holds(self, lease_id: str) -> bool:
        """Whether a sandbox on the lease is alive."""
        return any(box.lease_id == lease_id for box in self._live.values())

    def release(self, lease_id: str, reason: str) -> None:
        """End every sandbox on the lease (their tasks clean up)."""
        for box in self._live.values():
            if box.lease_id == lease_id:
                self._end(box, reason)

    @staticmethod
    def _end(box: E2BSandbox, reason: str) -> None:
        box.end_reason = box.end_reason or reason
        box.scope.cancel()


def _reaches(owner: Owner, box: E2BSandbox) -> bool:
    return owner.owns(box.owner.account, box.owner.lineage)
