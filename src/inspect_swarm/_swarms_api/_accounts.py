"""What the admin routes take of an account: the scopes its key may hold, and its quotas by
name, each with its wire name and a line of help."""

from __future__ import annotations

from typing import TypedDict

ACCOUNT_SCOPES = ("read", "provision")
"""The scopes an account added while the server runs may hold (never `admin`)."""


class QuotaOptions(TypedDict, total=False):
    """An account's quotas, each in place of the server's default for it (None: the
    default again)."""

    max_queued: int | None
    runs_per_minute: int | None
    max_running: int | None
    max_memory_gb: int | None


QUOTA_HELP = {
    "max_queued": "sandboxes one account may have waiting to start, in all its runs",
    "runs_per_minute": "runs one account may start in any 60 seconds",
    "max_running": "sandboxes one account may have running at once (a run's at its concurrency)",
    "max_memory_gb": "GB one account's running sandboxes may book at once",
}
"""What each quota bounds (the server's flags and the accounts commands say it)."""


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


QUOTA_WIRE = {name: _camel(name) for name in QuotaOptions.__annotations__}
"""Each quota's name in the API's JSON (`max_memory_gb` is `maxMemoryGb`)."""
