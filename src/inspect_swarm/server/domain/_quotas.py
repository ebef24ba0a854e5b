"""Each account's quotas: how many sandboxes it may have waiting and how many runs it may
start a minute, whichever key it calls with (its own, a lease's or a sandbox's)."""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque

from ..model._types import QuotaExceeded, Quotas
from ..records._store import Store

WINDOW = 60.0
"""The seconds over which runs started are counted."""


class AccountQuotas:
    """Refuses a start past an account's quotas, and counts the starts it lets through."""

    def __init__(self, store: Store, quotas: Quotas) -> None:
        self._store = store
        self._quotas = quotas
        self._starts: defaultdict[str, deque[float]] = defaultdict(deque)
        """Each account's starts in the last minute, oldest first."""

    def check(self, account: str, sandboxes: int) -> None:
        """Refuse (QuotaExceeded) a run of `sandboxes` the account may not start now."""
        quotas, now = self._quotas, time.monotonic()
        starts = self._starts[account]
        while starts and starts[0] <= now - WINDOW:
            starts.popleft()
        if len(starts) >= quotas.runs_per_minute:
            wait = math.ceil(starts[0] + WINDOW - now)
            raise QuotaExceeded(
                f"runs per minute: {len(starts)} of {quotas.runs_per_minute} started in the "
                f"last minute, none left; the next may start in {wait} s",
                retry_after=wait,
            )
        queued = self._store.queued(account)
        if queued + sandboxes > quotas.max_queued:
            left = max(0, quotas.max_queued - queued)
            raise QuotaExceeded(
                f"sandboxes queued: {queued} of {quotas.max_queued} wait to start, {left} "
                f"left, and this run would queue {sandboxes}; start it once some have "
                "started, or cancel runs"
            )

    def started(self, account: str) -> None:
        """Count a run the account started now."""
        self._starts[account].append(time.monotonic())
