"""The server's lease, and the keys made for it.

One account rents the server at a time. Its lease opens when it first starts something (or
asks for one) and ends when released, after `--idle-release` with nothing on it, or when its
account's key is removed from the server. Ending it ends everything on it: its runs (through
the engine), its long-lived sandboxes (through their holder), and every key made for it.
"""

from __future__ import annotations

import time
import uuid
from typing import Protocol

import anyio

from ..engines._engine import Engine
from ..model._keys import ROOT, child_lineage, new_key
from ..model._types import (
    KeyRecord,
    Lease,
    NoLease,
    PlanRequired,
    ServerBusy,
    Settings,
)
from ..records._store import Store

_RELEASE_REASONS = {"closed": "closed: the account's key was removed from the server"}
"""What a lease's `releaseReason` means, where the reason alone does not say it."""
_TICK_SECONDS = 1.0


class LeaseHolder(Protocol):
    """Sandboxes kept outside runs that live and end with a lease."""

    def holds(self, lease_id: str) -> bool:
        """Whether a sandbox on the lease is alive (the lease is not idle)."""
        ...

    def release(self, lease_id: str, reason: str) -> None:
        """End every sandbox on the lease."""
        ...


class Keyring:
    """The keys made for leases and their sandboxes (the store keeps only their hashes), and
    the variables that carry them into sandboxes (the engine's `SandboxCredentials`)."""

    def __init__(self, store: Store, url: str = "") -> None:
        self._store = store
        self._url = url
        self._lease_keys: dict[str, str] = {}
        """Each open lease's key as its account is shown it."""

    @property
    def url(self) -> str:
        """The server's address, as sandboxes reach it."""
        return self._url

    def find(self, key: str) -> KeyRecord | None:
        """What a key made for a lease reaches, while the lease is open (None otherwise)."""
        return self._store.key(key)

    def lease_key(self, lease: Lease) -> str:
        """The open lease's key: it acts for the account while the lease is open.

        Made on first asking, and again by a restarted server (which kept only the hashes of
        the keys it gave before: those keep working too).
        """
        key = self._lease_keys.get(lease.id)
        if key is None:
            key = self._lease_keys[lease.id] = new_key()
            self._store.insert_key(key, lease.account, lease.id, None, ROOT)
        return key

    def env(self, lease: Lease, key: str) -> dict[str, str]:
        """The variables a sandbox on the lease gets, with its own `key`."""
        domain = self._url.split("://", 1)[-1]
        return {
            "MARITIME_API_KEY": key,
            "E2B_API_KEY": key,
            "MARITIME_API_URL": self._url,
            "E2B_DOMAIN": domain,
            "E2B_API_URL": self._url,
            "E2B_SANDBOX_URL": self._url,
            "MARITIME_SERVER_LEASE_ID": lease.id,
        }

    def sandbox_env(self, lease_id: str, sandbox_id: str, lineage: str) -> dict[str, str]:
        """The variables of the sandbox `sandbox_id`, made under `lineage` on the lease, with
        a new key of its own: it reaches only what the sandbox makes, until `revoke`."""
        lease = self._store.lease(lease_id)
        assert lease is not None, f"no lease {lease_id}"
        key = new_key()
        self._store.insert_key(
            key, lease.account, lease.id, sandbox_id, child_lineage(lineage, sandbox_id)
        )
        return self.env(lease, key)

    def revoke(self, sandbox_id: str) -> None:
        """The sandbox has ended: its key stops working."""
        self._store.revoke_sandbox_keys(sandbox_id)

    def renew_lease_key(self, lease_id: str) -> None:
        """The lease's own key stops working; a new one is made when next asked for."""
        self._store.revoke_lease_key(lease_id)
        self._lease_keys.pop(lease_id, None)

    def revoke_lease(self, lease_id: str) -> None:
        """The lease has ended: every key made for it stops working."""
        self._store.revoke_lease_keys(lease_id)
        self._lease_keys.pop(lease_id, None)


class Leases:
    """Who rents the server, and what ends with their lease."""

    def __init__(self, store: Store, settings: Settings, keyring: Keyring, engine: Engine):
        self._store = store
        self._settings = settings
        self._keyring = keyring
        self._engine = engine
        self._holders: list[LeaseHolder] = []
        """What keeps sandboxes on a lease besides the engine's runs."""
        self._idle_since: float | None = None

    def hold(self, holder: LeaseHolder) -> None:
        """Have `holder`'s sandboxes keep a lease from idling, and end with it."""
        self._holders.append(holder)

    def current(self) -> Lease | None:
        """The lease that holds this server now, if any."""
        return self._store.open_lease()

    def rent(self, account: str) -> tuple[Lease, bool]:
        """The account's open lease, made if the server is free; (lease, created)."""
        current = self.current()
        if current is not None and current.account != account:
            raise ServerBusy()
        if current is not None:
            return current, False
        if self._settings.plan == "none":
            raise PlanRequired()
        lease = Lease(f"lease-{uuid.uuid4().hex[:12]}", account, time.time(), None, None)
        self._store.insert_lease(lease)
        self._idle_since = time.monotonic()
        return lease, True

    def touch(self) -> None:
        """Something started on the lease: it is not idle."""
        self._idle_since = None

    def release_by(self, account: str) -> Lease:
        """End the account's lease (NoLease if it rents none); the ended lease."""
        held = self.current()
        if held is None or held.account != account:
            raise NoLease()
        self.release(held, "released")
        ended = self._store.lease(held.id)
        assert ended is not None
        return ended

    def release(self, lease: Lease, reason: str) -> None:
        """End a lease, every key made for it and every sandbox on it."""
        self._store.release_lease(lease.id, reason)
        self._keyring.revoke_lease(lease.id)
        # the run's `error`, as billing's on a hosted server: its queued sandboxes fail with
        # it, and its running ones stop too, since releasing ends every sandbox on the server
        why = _RELEASE_REASONS.get(reason, reason)
        self._engine.end_lease(
            lease.id, f"the server's lease ended ({why}): every sandbox on it was ended"
        )
        for holder in self._holders:
            holder.release(lease.id, f"lease {reason}")

    def close_accounts(self, accounts: frozenset[str]) -> None:
        """End the lease of an account not in `accounts` (its key was removed from the
        server): every key made for it stops working, and its runs and sandboxes end."""
        lease = self.current()
        if lease is not None and lease.account not in accounts:
            self.release(lease, "closed")

    def close(self, account: str) -> None:
        """End the account's lease, if it holds the server (the account was removed)."""
        lease = self.current()
        if lease is not None and lease.account == account:
            self.release(lease, "closed")

    async def serve(self) -> None:
        """Release a lease left idle for `idle_release` seconds, until cancelled."""
        while True:
            self._check_idle()
            await anyio.sleep(_TICK_SECONDS)

    def _check_idle(self) -> None:
        lease = self.current()
        if lease is None:
            return
        held = any(holder.holds(lease.id) for holder in self._holders)
        if held or self._engine.holds(lease.id):
            self._idle_since = None
            return
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= self._settings.idle_release:
            self.release(lease, "idle")
