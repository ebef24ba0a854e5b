"""Runs as the API shows them, kept in memory and in step with SQLite."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inspect_swarm.server import _views
from inspect_swarm.server._keys import Owner
from inspect_swarm.server._store import Store
from inspect_swarm.server._views import Views

ISOLATION = {"mode": "process"}
SPEC = {
    "command": "true",
    "size": {"name": "custom", "vcpus": 1, "memoryGb": 1},
    "timeoutSeconds": 600,
    "template": "base",
    "resultPath": None,
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "swarm.db")
    yield store
    store.close()


def _start(
    store: Store, run_id: str, count: int, account: str = "acct", lineage: str = "/"
) -> None:
    run = {
        "id": run_id,
        "account": account,
        "lineage": lineage,
        "lease_id": "lease-1",
        "name": None,
        "spec": SPEC,
        "concurrency": 2,
        "created_at": time.time(),
    }
    inputs = [{"args": [], "env": {}, "files": {}}] * count
    store.insert_run(run, inputs, [f"sbx-{run_id}{i}" for i in range(count)], None)


def _change(store: Store, views: Views, run_id: str, idx: int, **fields: Any) -> None:
    """What the engine does for every change: SQLite, then the view."""
    store.update_sandbox(run_id, idx, **fields)
    views.set_sandbox(run_id, idx, fields)


def _fresh(store: Store, run_id: str) -> dict[str, Any]:
    """The run as a view loaded from SQLite alone shows it."""
    view = Views(store, ISOLATION).get(run_id)
    assert view is not None
    return dict(json.loads(view.body()))


def test_a_view_follows_every_change_and_matches_sqlite(store: Store) -> None:
    _start(store, "r1", 3)
    views = Views(store, ISOLATION)
    view = views.get("r1")
    assert view is not None
    assert json.loads(view.body())["counts"]["queued"] == 3
    _change(store, views, "r1", 0, status="booting", started_at=time.time())
    _change(store, views, "r1", 0, status="succeeded", exit_code=0, stdout_tail="hi\n")
    ended = {"status": "cancelled", "error": "cancelled", "ended_at": time.time()}
    store.end_sandboxes("r1", "queued", ended)
    views.end_sandboxes("r1", "queued", ended)
    body = json.loads(view.body())
    assert [s["status"] for s in body["sandboxes"]] == ["succeeded", "cancelled", "cancelled"]
    assert body["sandboxes"][0]["stdoutTail"] == "hi\n"
    assert body["counts"]["succeeded"] == 1 and body["counts"]["cancelled"] == 2
    assert body["done"] == 3
    fresh = _fresh(store, "r1")
    assert {**body, "durationSeconds": 0} == {**fresh, "durationSeconds": 0}
    lines = [json.loads(line) for line in view.results().splitlines()]
    assert lines == body["sandboxes"]


def test_views_are_private_to_their_account(store: Store) -> None:
    _start(store, "r1", 1, account="alice")
    views = Views(store, ISOLATION)
    assert views.get("r1", Owner("bob")) is None
    assert views.get("r1", Owner("alice")) is not None
    assert views.get("nope") is None


def test_a_sandbox_key_reaches_only_what_its_sandbox_made(store: Store) -> None:
    _start(store, "top", 1, account="alice")
    _start(store, "child", 1, account="alice", lineage="/sbx-a/")
    _start(store, "grandchild", 1, account="alice", lineage="/sbx-a/sbx-c/")
    views = Views(store, ISOLATION)
    reach = {
        lineage: [s["id"] for s in views.summaries(Owner("alice", lineage))]
        for lineage in ("/", "/sbx-a/", "/sbx-a/sbx-c/", "/sbx-b/")
    }
    assert reach == {
        "/": ["grandchild", "child", "top"],
        "/sbx-a/": ["grandchild", "child"],
        "/sbx-a/sbx-c/": ["grandchild"],
        "/sbx-b/": [],
    }
    assert views.get("child", Owner("alice", "/sbx-a/")) is not None
    assert views.get("child", Owner("alice", "/sbx-a/sbx-c/")) is None
    assert views.get("top", Owner("alice", "/sbx-a/")) is None
    assert views.get("child", Owner("bob", "/sbx-a/")) is None


def test_completed_runs_leave_memory_first_and_come_back_unchanged(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_views, "_CACHE_BYTES", 0)
    _start(store, "done", 2)
    _start(store, "live", 2)
    views = Views(store, ISOLATION)
    done = views.get("done")
    assert done is not None
    _change(store, views, "done", 0, status="succeeded", stdout_tail="kept\n")
    store.update_run("done", status="completed", ended_at=time.time())
    views.set_run("done", {"status": "completed", "ended_at": time.time()})
    before = json.loads(done.body())
    live = views.get("live")  # loading it evicts the completed run, never the live one
    assert live is not None
    _change(store, views, "done", 1, status="failed")  # not in memory: SQLite alone
    again = views.get("done")
    assert again is not None and again is not done
    after = json.loads(again.body())
    assert after["sandboxes"][0] == before["sandboxes"][0]
    assert after["sandboxes"][1]["status"] == "failed"
    assert views.get("live") is live


def test_summaries_list_newest_first_with_counts(store: Store) -> None:
    _start(store, "old", 1)
    _start(store, "new", 2)
    views = Views(store, ISOLATION)
    views.get("new")  # one in memory, one read from SQLite
    summaries = views.summaries(Owner("acct"))
    assert [s["id"] for s in summaries] == ["new", "old"]
    assert [s["counts"]["queued"] for s in summaries] == [2, 1]
    assert all("sandboxes" not in s for s in summaries)
