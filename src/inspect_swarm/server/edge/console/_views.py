"""What each console page shows, taken from the domain's answers: filtered, ordered and cut
into pages here, so that a page's size, not the store's, decides what it costs to render."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, get_args

from ...model._types import RunRecord, RunStatus, SandboxRecord
from ...records._wire import sandbox_object

T = TypeVar("T")

RUNS_PER_PAGE = 50
SANDBOXES_PER_PAGE = 100
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
"""The statuses a run may have, in the order it has them (the runs page filters by them)."""


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a longer list."""

    items: Sequence[T]
    number: int
    """From 1."""
    pages: int
    total: int
    """How many items the whole list has."""


def page_of(items: Sequence[T], number: int, size: int) -> Page[T]:
    """Page `number` of `items` (the last one where `number` is past it)."""
    pages = max(1, -(-len(items) // size))
    number = min(max(1, number), pages)
    start = (number - 1) * size
    return Page(items[start : start + size], number, pages, len(items))


def runs_page(
    runs: Sequence[RunRecord],
    status: str,
    query: str,
    number: int,
    summary: Callable[[RunRecord], dict[str, Any]],
) -> Page[dict[str, Any]]:
    """Runs with `status` (any when empty) whose name holds `query` or whose id starts with
    it, case aside; only the page's runs are given to `summary` (which reads their counts),
    so a store of thousands costs little more than a page of them."""
    wanted = _run_filter(status, query.strip().lower())
    page = page_of([run for run in runs if wanted(run)], number, RUNS_PER_PAGE)
    return Page([summary(run) for run in page.items], page.number, page.pages, page.total)


def _run_filter(status: str, query: str) -> Callable[[RunRecord], bool]:
    def wanted(run: RunRecord) -> bool:
        if status and run.status != status:
            return False
        return not query or query in (run.name or "").lower() or run.id.startswith(query)

    return wanted


def sandboxes_page(
    sandboxes: Sequence[SandboxRecord], status: str, number: int
) -> Page[dict[str, Any]]:
    """A run's sandboxes with `status` (any when empty), failed ones first and then in input
    order, as the API shows them; only the page's sandboxes are encoded."""
    chosen = [s for s in sandboxes if not status or s.status == status]
    chosen.sort(key=lambda s: (s.status != "failed", s.idx))
    page = page_of(chosen, number, SANDBOXES_PER_PAGE)
    items = [
        {**sandbox_object(s), "seconds": seconds(s.started_at, s.ended_at)} for s in page.items
    ]
    return Page(items, page.number, page.pages, page.total)


def seconds(started: float | None, ended: float | None) -> float | None:
    """How long something that started and ended took (None while it goes on)."""
    return None if started is None or ended is None else ended - started


def duration(value: float | None) -> str:
    """Seconds in words a glance reads: `850 ms`, `4.2 s`, `3 min 5 s`, `2 h 10 min`."""
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
