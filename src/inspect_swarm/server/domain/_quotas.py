"""Each account's quotas: how many sandboxes it may have waiting and running, the memory they
may book, and how many runs it may start a minute, whichever key it calls with (its own, a
lease's or a sandbox's)."""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..model._types import QuotaExceeded, Quotas, Size
from ..records._store import Store

WINDOW = 60.0
"""The seconds over which runs started are counted."""


class AccountQuotas:
    """Refuses a start past an account's quotas, and counts the starts it lets through."""

    def __init__(self, store: Store, quotas: Callable[[str], Quotas]) -> None:
        """`quotas`: an account's (`Accounts.quotas`)."""
        self._store = store
        self._quotas = quotas
        self._starts: defaultdict[str, deque[float]] = defaultdict(deque)
        """Each account's starts in the last minute, oldest first."""
        self._booting: Counter[tuple[str, str]] = Counter()
        """Sandboxes outside runs that boot, not yet recorded: (account, "count" or "gb")."""

    def check_run(self, account: str, sandboxes: int, at_once: int, size: Size) -> None:
        """Refuse (QuotaExceeded) a run of `sandboxes` of `size`, `at_once` of them running
        at a time, that the account may not start now."""
        quotas, now = self._quotas(account), time.monotonic()
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
        _refuse_past(
            "sandboxes queued",
            self._store.queued(account),
            sandboxes,
            quotas.max_queued,
            ("wait to start", "this run would queue"),
            "start it once some have started, or cancel runs",
        )
        self._check_room(account, at_once, size, "this run (at its concurrency)")

    @contextmanager
    def booking(self, account: str, size: Size) -> Iterator[None]:
        """Refuse (QuotaExceeded) a sandbox outside runs of `size` that the account may not
        start now, and count it as running while it boots (before it is recorded)."""
        self._check_room(account, 1, size, "this sandbox")
        booting = Counter({(account, "count"): 1, (account, "gb"): size.memory_gb})
        self._booting += booting
        try:
            yield
        finally:
            self._booting -= booting

    def _check_room(self, account: str, count: int, size: Size, what: str) -> None:
        """Refuse `count` more sandboxes of `size` running at once past the account's quotas
        of sandboxes running and memory booked."""
        quotas = self._quotas(account)
        running, booked = self._store.at_once(account)
        running += self._booting[account, "count"]
        booked += self._booting[account, "gb"]
        _refuse_past(
            "sandboxes running",
            running,
            count,
            quotas.max_running,
            ("may run at once", f"{what} would run"),
            "lower its concurrency, or wait for sandboxes to end",
        )
        _refuse_past(
            "memory booked",
            booked,
            count * size.memory_gb,
            quotas.max_memory_gb,
            ("booked", f"{what} would book"),
            "lower its concurrency or size, or wait for sandboxes to end",
            " GB",
        )

    def started(self, account: str) -> None:
        """Count a run the account started now."""
        self._starts[account].append(time.monotonic())


def _refuse_past(
    quota: str,
    used: int,
    asked: int,
    most: int,
    verbs: tuple[str, str],
    fix: str,
    unit: str = "",
) -> None:
    """Refuse (QuotaExceeded) `asked` more where `used` of `most` are taken: what is left and
    how to get more (`verbs`: what the used do, and what the request would do)."""
    if used + asked > most:
        left = max(0, most - used)
        raise QuotaExceeded(
            f"{quota}: {used} of {most}{unit} {verbs[0]}, {left}{unit} left, and "
            f"{verbs[1]} {asked}{unit}; {fix}"
        )
