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
from inspect_swarm.server.model._types import SandboxRecord


def test_a_page_past_the_last_is_the_last() -> None:
    page = page_of(list(range(7)), 9, 3)
    assert (page.items, page.number, page.pages, page.total) == ([6], 3, 3, 7)
    assert page_of([], 1, 3).pages == 1


def _run(run_id: str, name: str | None, status: str) -> dict[str, Any]:
    return {"id": run_id, "name": name, "status": status}


def test_runs_are_found_by_status_by_name_and_by_id_prefix() -> None:
    runs = [_run("ab12", "Nightly Eval", "completed"), _run("cd34", None, "running")]
    assert [r["id"] for r in runs_page(runs, "running", "", 1).items] == ["cd34"]
    assert [r["id"] for r in runs_page(runs, "", "nightly", 1).items] == ["ab12"]
    assert [r["id"] for r in runs_page(runs, "", "cd", 1).items] == ["cd34"]
    assert runs_page(runs, "", "d3", 1).items == []  # an id is found by its start alone
    many = [_run(f"{i:04x}", None, "completed") for i in range(RUNS_PER_PAGE + 1)]
    assert len(runs_page(many, "", "", 2).items) == 1


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
