"""Keys the server hands out, and whose records a key may reach.

A lease key (`mlk_`, the lease's `apiKey`) acts for its account while the lease is open. A
sandbox key (also `mlk_`, in each sandbox's `MARITIME_API_KEY`) acts for one sandbox: it
reaches only what that sandbox made, and what those made in turn. Runs and long-lived
sandboxes record this as a lineage, the ids of the sandboxes that made them, root first
(`/sbx-a/sbx-b/`; `/` for what an account made): a key reaches a record when the record's
lineage starts with the key's.

Only a key's SHA-256 is stored: keys are random 192-bit tokens, so a plain hash cannot be
turned back into one, and a stolen database opens nothing.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

KEY_PREFIX = "mlk_"
ACCOUNT_KEY_PREFIX = "isk_"
"""The prefix of a server's own keys: the one it makes, and those of accounts it adds."""
READ = "read"
PROVISION = "provision"
ADMIN = "admin"
"""The scope that manages accounts: only a key the server is given (or makes) may hold it."""
ROOT = "/"
"""The lineage of what an account made itself, and of its own keys."""


@dataclass(frozen=True)
class Owner:
    """Whose records a caller reaches: an account's, or those made under one of its sandboxes."""

    account: str
    lineage: str = ROOT
    """The lineage of the records reached: `/` for all of the account's."""

    @property
    def sandbox_key(self) -> bool:
        """Whether this is a sandbox's key (it reaches only what the sandbox made)."""
        return self.lineage != ROOT

    @property
    def namespace(self) -> str:
        """Where this caller's idempotency keys live (apart from every other sandbox's)."""
        return self.label

    @property
    def label(self) -> str:
        """Who this is, for logs: the account, and the sandbox lineage for a sandbox's key."""
        return self.account if self.lineage == ROOT else f"{self.account}{self.lineage}"

    def owns(self, account: str, lineage: str) -> bool:
        """Whether a record of `account` made under `lineage` is within reach."""
        return account == self.account and lineage.startswith(self.lineage)


def child_lineage(lineage: str, sandbox_id: str) -> str:
    """The lineage of what the sandbox `sandbox_id`, itself made under `lineage`, makes."""
    return f"{lineage}{sandbox_id}/"


def new_key(prefix: str = KEY_PREFIX) -> str:
    """A new random key (`mlk_`, unless another prefix is given)."""
    return prefix + secrets.token_urlsafe(24)


def key_hash(key: str) -> str:
    """What the store keeps of a key."""
    return hashlib.sha256(key.encode()).hexdigest()
