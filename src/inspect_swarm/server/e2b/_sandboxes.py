"""E2B sandboxes: the server's isolated sandboxes without a command, alive until killed or
timed out, booked against the server's memory and ended with their lease."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .._cgroups import Limits
from .._engine import GIB, Engine, _sandbox_id
from .._isolation import Sandbox, SandboxError
from .._schema import ApiError
from .._views import iso

if TYPE_CHECKING:
    from ._process import Command

ENVD_VERSION = "0.5.7"
"""The envd protocol version this server speaks (gates the SDK's features)."""
ENVD_PORT = 49983
MEMORY_GB = 1
"""What one E2B sandbox books and may use (E2B's default template has 512 MiB)."""
VCPUS = 2
DEFAULT_TIMEOUT = 300
TEMPLATES = ("base", "python", "code-interpreter")


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
    account: str
    lease_id: str
    template: str
    metadata: dict[str, str]
    env: dict[str, str]
    """Variables every process gets (the lease's, E2B's and the create call's)."""
    token: str
    """The envd access token the daemon side requires (`X-Access-Token`)."""
    sandbox: Sandbox
    started_at: float
    end_at: float
    scope: anyio.CancelScope
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
            "cpuCount": VCPUS,
            "memoryMB": MEMORY_GB * 1024,
            "diskSizeMB": 12 * 1024,
            "state": "running",
            "envdVersion": ENVD_VERSION,
            "metadata": self.metadata,
        }


class E2BSandboxes:
    """The live E2B sandboxes of one server."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._live: dict[str, E2BSandbox] = {}
        engine.holders.append(self)

    async def create(
        self,
        account: str,
        template: str,
        lifetime: int,
        metadata: dict[str, str],
        env: dict[str, str],
    ) -> E2BSandbox:
        """Boot a sandbox on the account's lease (made if the server is free) that ends
        `lifetime` seconds from now unless its timeout is set again."""
        if template not in TEMPLATES:
            raise E2BError(
                404, f"template {template!r} not found; this server has {', '.join(TEMPLATES)}"
            )
        self._check_timeout(lifetime)
        engine = self.engine
        try:
            lease, _ = engine.lease(account)
            engine.book(MEMORY_GB)
        except ApiError as ex:
            raise E2BError(ex.status, ex.detail) from None
        sandbox_id = _sandbox_id()
        try:
            # a client that gives up mid-boot must not leave a half-made sandbox
            with anyio.CancelScope(shield=True):
                sandbox = await engine.host.create(sandbox_id, Limits(MEMORY_GB * GIB, VCPUS))
        except (SandboxError, OSError) as ex:
            engine.unbook(MEMORY_GB)
            raise E2BError(500, f"sandbox boot failed: {ex}") from None
        now = time.time()
        box = E2BSandbox(
            id=sandbox_id,
            account=account,
            lease_id=lease.id,
            template=template,
            metadata=metadata,
            env={
                **engine.lease_env(lease),
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
        engine.start_soon(self._lifetime, box)
        return box

    def _check_timeout(self, timeout: int) -> None:
        most = self.engine.settings.max_timeout
        if not 1 <= timeout <= most:
            raise E2BError(400, f"timeout must be 1 to {most} seconds, got {timeout}")

    async def _lifetime(self, box: E2BSandbox) -> None:
        try:
            with box.scope:
                await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                del self._live[box.id]
                await box.sandbox.close()
                self.engine.unbook(MEMORY_GB)
                box.ended.set()

    def get(self, sandbox_id: str, account: str | None = None) -> E2BSandbox:
        """A live sandbox (of `account`, when given), else 404."""
        box = self._live.get(sandbox_id)
        if box is None or (account is not None and box.account != account):
            raise E2BError(404, f"sandbox {sandbox_id!r} not found")
        return box

    def of(self, account: str) -> list[E2BSandbox]:
        """The account's live sandboxes, oldest first."""
        return [box for box in self._live.values() if box.account == account]

    async def kill(self, box: E2BSandbox) -> None:
        """End a sandbox and wait until it is gone."""
        box.scope.cancel()
        await box.ended.wait()

    def set_timeout(self, box: E2BSandbox, timeout: int) -> None:
        """End the sandbox `timeout` seconds from now."""
        self._check_timeout(timeout)
        box.end_at = time.time() + timeout
        box.scope.deadline = anyio.current_time() + timeout

    def holds(self, lease_id: str) -> bool:
        """Whether a sandbox on the lease is alive."""
        return any(box.lease_id == lease_id for box in self._live.values())

    def release(self, lease_id: str, reason: str) -> None:
        """End every sandbox on the lease (their tasks clean up)."""
        for box in self._live.values():
            if box.lease_id == lease_id:
                box.scope.cancel()
