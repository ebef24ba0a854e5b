"""What the console's pages hold, without a server: filters, order, pages, and the fragments
kept for consoles that ask again."""

from __future__ import annotations

import time
from typing import Any

import pytest

from inspect_swarm.server.edge.console import _fragments
from inspect_swarm.server.edge.console._fragments import RENDER_SHARE, Fragments
from inspect_swarm.server.edge.console._views import (
    RUNS_PER_PAGE,
    SANDBOXES_PER_PAGE,
    page_of,
    runs_page,
    sandboxes_page,
)
from inspect_swarm.server.model._types import RunRecord, RunSpec, RunStatus, SandboxRecord, Size


def test_a_page_past_the_last_is_the_last() -> None:
    page = page_of(list(range(7)), 9, 3)
    assert (page.items, page.number, page.pages, page.total) == ([6], 3, 3, 7)
    assert page_of([], 1, 3).pages == 1


def _run(run_id: str, name: str | None, status: RunStatus) -> RunRecord:
    spec = RunSpec("true", Size(1, 1), 60, "base", None)
    return RunRecord(run_id, "acct", "/", "lease", name, spec, 1, 1, 0.0, status)


def _ids(runs: list[RunRecord], status: str, query: str, number: int = 1) -> list[str]:
    return [r["id"] for r in runs_page(runs, status, query, number, _summary).items]


def _summary(run: RunRecord) -> dict[str, Any]:
    return {"id": run.id}


def test_runs_are_found_by_status_by_name_and_by_id_prefix() -> None:
    runs = [_run("ab12", "Nightly Eval", "completed"), _run("cd34", None, "running")]
    assert _ids(runs, "running", "") == ["cd34"]
    assert _ids(runs, "", "nightly") == ["ab12"]
    assert _ids(runs, "", "cd") == ["cd34"]
    assert _ids(runs, "", "d3") == []  # an id is found by its start alone
    many = [_run(f"{i:04x}", None, "completed") for i in range(RUNS_PER_PAGE + 1)]
    assert _ids(many, "", "", 2) == [many[-1].id]


def test_only_the_runs_a_page_shows_are_summarised() -> None:
    """A summary reads a run's counts: a store of thousands of runs must not pay for each of
    them at every rendering of the runs page."""
    runs = [_run(f"{i:04x}", None, "completed") for i in range(20 * RUNS_PER_PAGE)]
    summarised: list[str] = []

    def summary(run: RunRecord) -> dict[str, Any]:
        summarised.append(run.id)
        return _summary(run)

    page = runs_page(runs, "", "", 3, summary)
    assert summarised == [run.id for run in runs[2 * RUNS_PER_PAGE : 3 * RUNS_PER_PAGE]]
    assert (page.number, page.pages, page.total) == (3, 20, len(runs))


def test_a_run_of_5000_sandboxes_is_shown_a_page_at_a_time_failed_first() -> None:
    sandboxes = [
        SandboxRecord("run", i, f"sbx-{i}", "failed" if i % 1000 == 999 else "succeeded")
        for i in range(5000)
    ]
    first = sandboxes_page(sandboxes, "", 1)
    assert len(first.items) == SANDBOXES_PER_PAGE and first.pages == 50
    assert [s["index"] for s in first.items[:6]] == [999, 1999, 2999, 3999, 4999, 0]
    failed = sandboxes_page(sandboxes, "failed", 1)
    assert failed.total == 5 and {s["status"] for s in failed.items} == {"failed"}


def test_fragments_are_shared_for_a_moment_and_never_pile_up() -> None:
    rendered: list[int] = []

    def render(n: int) -> str:
        rendered.append(n)
        return f"<p>{n}</p>"

    kept = Fragments(ttl=60, most=10)
    first = kept.get("page", lambda: render(1))
    assert kept.get("page", lambda: render(2)) is first and rendered == [1]
    for n in range(1000):
        kept.get(("query", n), lambda n=n: render(n))  # type: ignore[misc]
    assert len(kept) == 10
    assert Fragments().get("other", lambda: "<p>1</p>").etag == first.etag  # bytes decide


def test_a_fragment_slow_to_render_is_kept_for_longer() -> None:
    def slowly() -> str:
        time.sleep(0.2)
        return "<p>many runs</p>"

    kept = Fragments(ttl=0)
    made = kept.get("runs", slowly)
    assert made.kept >= RENDER_SHARE * 0.2
    assert kept.get("runs", slowly) is made


def test_a_fragment_of_unchanged_runs_is_kept_whatever_its_age(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_fragments, "RENDER_SHARE", 0)  # kept for no time at all, but...
    rendered: list[int] = []

    def render() -> str:
        rendered.append(1)
        return f"<p>{len(rendered)}</p>"

    kept = Fragments(ttl=0)
    first = kept.get("runs", render, version=7)
    assert kept.get("runs", render, version=7) is first and len(rendered) == 1
    assert kept.get("runs", render, version=8).body == b"<p>2</p>"
