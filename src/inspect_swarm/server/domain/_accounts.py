"""Accounts added while the server runs: each with a key of its own (only its hash is kept),
the scopes that key holds, and quotas of its own in place of the server's defaults.

The accounts of the keys a server is given when it starts (or of the one it makes) are fixed
for as long as it runs; these are added, rotated and removed by a key with the `admin` scope.
Removing one ends its lease, if it holds the server: its runs and sandboxes end, and every key
made for it stops working, as when a key is taken off the server.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import time
from collections.abc import Iterable, Mapping

from ..model._keys import ACCOUNT_KEY_PREFIX, PROVISION, READ, new_key
from ..model._types import Account, AccountExists, InvalidRequest, NotFound, Quotas
from ..records._store import Store
from ._leases import Keyring, Leases

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
SCOPES = frozenset({READ, PROVISION})
"""What an added account's key may hold: managing accounts stays with the server's keys."""
QUOTA_NAMES = frozenset(field.name for field in dataclasses.fields(Quotas))


class Accounts:
    """The accounts added to one server, and the quotas each one has."""

    def __init__(self, store: Store, defaults: Quotas, leases: Leases, keyring: Keyring) -> None:
        self._store = store
        self._defaults = defaults
        self._leases = leases
        self._keyring = keyring

    def add(
        self, name: str, scopes: Iterable[str] | None, quotas: Mapping[str, int]
    ) -> tuple[Account, str]:
        """Add an account (every scope it may hold when `scopes` is None); it and its key."""
        if not _NAME.fullmatch(name):
            raise InvalidRequest(
                "name",
                f"{name!r} is no account name; use 1 to 63 of a-z, 0-9, '.', '_' and '-', "
                "starting with a letter or digit",
            )
        if self._store.account(name) is not None:
            raise AccountExists(
                f"an account named {name!r} exists; choose another name, or rotate its key"
            )
        account = Account(
            f"acct_{secrets.token_hex(6)}",
            name,
            _scopes(scopes),
            _quotas(quotas),
            time.time(),
        )
        key = new_key(ACCOUNT_KEY_PREFIX)
        self._store.insert_account(account, key)
        return account, key

    def listing(self) -> list[Account]:
        """Every account added, oldest first."""
        return self._store.accounts()

    def rotate(self, name: str) -> tuple[Account, str]:
        """Give an account a new key; it and the key. The one before stops working at once,
        and so does its lease's key (a new one is made when asked for); its sandboxes' keys
        work on."""
        account = self.named(name)
        key = new_key(ACCOUNT_KEY_PREFIX)
        self._store.set_account_key(name, key)
        lease = self._leases.current()
        if lease is not None and lease.account == account.id:
            self._keyring.renew_lease_key(lease.id)
        return self.named(name), key

    def set_quotas(self, name: str, quotas: Mapping[str, int | None]) -> Account:
        """Set an account's own quotas (None: the server's default again); the account."""
        account = self.named(name)
        given = {**account.quotas, **quotas}
        self._store.set_account_quotas(
            name, _quotas({k: v for k, v in given.items() if v is not None})
        )
        return self.named(name)

    def remove(self, name: str) -> Account:
        """Remove an account: its key and every key made for it stop working, and its lease,
        if it holds the server, ends with its runs and sandboxes; the removed account."""
        account = self.named(name)
        self._store.delete_account(name)
        self._leases.close(account.id)
        return account

    def named(self, name: str) -> Account:
        """The account of that name (NotFound otherwise)."""
        account = self._store.account(name)
        if account is None:
            raise NotFound(f"no account named {name!r}; `inspect-swarm accounts list` lists them")
        return account

    def of_key(self, key: str) -> Account | None:
        """The account whose key this is."""
        return self._store.account_of_key(key)

    def scopes(self, account_id: str) -> frozenset[str] | None:
        """What an added account's keys may do (None: no such account)."""
        account = self._store.account_by_id(account_id)
        return None if account is None else account.scopes

    def ids(self) -> frozenset[str]:
        """The ids of every account added."""
        return frozenset(account.id for account in self._store.accounts())

    def quotas(self, account_id: str) -> Quotas:
        """The quotas of any account, by its id: an added one's, or the server's defaults."""
        account = self._store.account_by_id(account_id)
        return self._defaults if account is None else self.quotas_of(account)

    def quotas_of(self, account: Account) -> Quotas:
        """An added account's quotas: its own where it has them, the server's defaults
        elsewhere."""
        return dataclasses.replace(self._defaults, **account.quotas)


def _scopes(scopes: Iterable[str] | None) -> frozenset[str]:
    given = SCOPES if scopes is None else frozenset(scopes)
    if not given or not given <= SCOPES:
        raise InvalidRequest(
            "scopes",
            f"{sorted(given)} are not scopes an account may hold; give one or both of "
            f"{', '.join(sorted(SCOPES))}",
        )
    return given


def _quotas(quotas: Mapping[str, int]) -> dict[str, int]:
    for name, value in quotas.items():
        if name not in QUOTA_NAMES:
            raise InvalidRequest(
                "quotas", f"{name!r} is no quota; the quotas are {', '.join(sorted(QUOTA_NAMES))}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequest(
                "quotas", f"{name}: must be a whole number of 1 or more, got {value!r}"
            )
    return dict(quotas)
