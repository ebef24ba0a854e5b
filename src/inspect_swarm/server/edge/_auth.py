"""Who calls, and what they may do: the server's bearer keys (one account each) and the `mlk_`
keys made for their leases and sandboxes, as FastAPI dependencies that authenticate a request
and check its scope before its route runs.

A route takes `Reader` or `Provisioner` and gets the caller's `Principal`. The keys live on the
app (`app.state.keys`). What a caller may do beyond its scope (a sandbox's key, say) is the
domain's to decide.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ..domain._server import SwarmServer
from ..model._keys import ADMIN, Owner
from ..model._keys import PROVISION as PROVISION
from ..model._keys import READ as READ
from ._access_log import note_caller
from ._errors import ApiError
from ._gate import Door

ALL_SCOPES = frozenset({READ, PROVISION})
"""What a server key given without scopes may do."""
KNOWN_SCOPES = ALL_SCOPES | {ADMIN}
MISSING_KEY = "missing API key: send Authorization: Bearer <key>"
UNKNOWN_KEY = "unknown API key"


@dataclass(frozen=True)
class Principal:
    """Who is calling: whose records its key reaches, what it may do, and the key itself."""

    owner: Owner
    scopes: frozenset[str]
    key: str


class Keys:
    """The bearer keys this server accepts: its own keys (one account each), the keys of the
    accounts added while it runs, and the `mlk_` keys made for those accounts while their
    lease is open (see `model._keys`)."""

    def __init__(self, keys: Mapping[str, frozenset[str]], server: SwarmServer) -> None:
        self._keys = dict(keys)
        self._scopes = {account_of(key): scopes for key, scopes in keys.items()}
        self._server = server

    @property
    def accounts(self) -> frozenset[str]:
        """The accounts of this server's keys."""
        return frozenset(self._scopes)

    def lookup(self, key: str) -> Principal | None:
        """Who a key stands for: a server key's account, an added account, or what a key made
        for an account that still has a key reaches (None if unknown)."""
        if key in self._keys:
            return Principal(Owner(account_of(key)), self._keys[key], key)
        if (added := self._server.find_account(key)) is not None:
            return Principal(Owner(added.id), added.scopes, key)
        made = self._server.find_key(key)
        if made is None:
            return None
        scopes = self._scopes.get(made.account) or self._server.account_scopes(made.account)
        return None if scopes is None else Principal(Owner(made.account, made.lineage), scopes, key)

    def identify(self, request: Request, key: str) -> Principal | None:
        """`lookup`, noting who made the request for its log line."""
        principal = self.lookup(key)
        if principal is not None:
            note_caller(request, principal.owner)
        return principal

    def door(self, *paths: str) -> Door:
        """The gate's door of routes that take a key: a request without a key, or with a
        bearer key this server does not know, is refused as `principal` refuses it."""

        def opens(authorization: str) -> bool:
            key = bearer(authorization)
            return key is None or self.lookup(key) is not None  # a malformed one: the route's

        missing = ApiError(401, "unauthorized", MISSING_KEY).body()
        unknown = ApiError(401, "unauthorized", UNKNOWN_KEY).body()
        return Door(paths, ("authorization",), 401, missing, opens=opens, wrong=unknown)

    def principal(self, request: Request, scope: str) -> Principal:
        """Authenticate the request by its bearer key and check that the key has `scope`."""
        key = bearer(request.headers.get("authorization", ""))
        if key is None:
            raise ApiError(401, "unauthorized", MISSING_KEY)
        principal = self.identify(request, key)
        if principal is None:
            raise ApiError(401, "unauthorized", UNKNOWN_KEY)
        if scope not in principal.scopes:
            raise ApiError(
                403, "insufficient_scope", f"this API key lacks the {scope!r} scope needed here"
            )
        return principal


def bearer(authorization: str) -> str | None:
    """The key of an `Authorization: Bearer <key>` header's value (None: not one)."""
    kind, _, key = authorization.partition(" ")
    return key.strip() if kind.lower() == "bearer" and key.strip() else None


def account_of(key: str) -> str:
    """The account a server key stands for (one account per key)."""
    return "acct_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def keys_of(request: Request) -> Keys:
    """The keys of the request's app."""
    keys = request.app.state.keys
    assert isinstance(keys, Keys), "create_app puts the server's keys on the app"
    return keys


async def _reader(request: Request) -> Principal:
    return keys_of(request).principal(request, READ)


async def _provisioner(request: Request) -> Principal:
    return keys_of(request).principal(request, PROVISION)


Reader = Annotated[Principal, Depends(_reader)]
"""A caller whose key has the `read` scope."""
Provisioner = Annotated[Principal, Depends(_provisioner)]
"""A caller whose key has the `provision` scope."""


async def _admin(request: Request) -> Principal:
    return keys_of(request).principal(request, ADMIN)


Admin = Annotated[Principal, Depends(_admin)]
"""A caller whose key has the `admin` scope (manages accounts)."""
