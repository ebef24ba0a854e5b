"""Runs as the API shows them: one write path keeps SQLite and the views in memory in step."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inspect_swarm.server.model._keys import Owner
from inspect_swarm.server.model._types import Outcome, RunRecord, RunSpec, SandboxInput, Size
from inspect_swarm.server.records import _runs
from inspect_swarm.server.records._runs import Runs
from inspect_swarm.server.records._store import Store

ISOLATION = {"mode": "process"}
SPEC = RunSpec("true", Size(1, 1), 600, "base", None)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "swarm.db")
    yield store
    store.close()


def _start(
    store: Store, run_id: str, count: int, account: str = "acct", lineage: str = "/"
) -> None:
    run = RunRecord(run_id, account, lineage, "lease-1", None, SPEC, count, 2, time.time())
    inputs = [SandboxInput()] * count
    store.insert_run(run, inputs, [f"sbx-{run_id}{i}" for i in range(count)], None)


def _fresh(store: Store, run_id: str) -> dict[str, Any]:
    """The run as a view loaded from SQLite alone shows it."""
    view = Runs(store, ISOLATION).get(run_id)
    assert view is not None
    return dict(json.loads(view.body()))


def test_a_view_follows_every_change_and_matches_sqlite(store: Store) -> None:
    _start(store, "r1", 3)
    runs = Runs(store, ISOLATION)
    view = runs.get("r1")
    assert view is not None
    assert json.loads(view.body())["counts"]["queued"] == 3
    runs.set_booting("r1", 0)
    runs.set_command_running("r1", 0)
    runs.set_ended("r1", 0, Outcome("succeeded", exit_code=0, stdout_tail="hi\n"))
    runs.end_queued("r1", Outcome("cancelled", "cancelled"))
    runs.set_completed("r1")
    body = json.loads(view.body())
    assert [s["status"] for s in body["sandboxes"]] == ["succeeded", "cancelled", "cancelled"]
    assert body["sandboxes"][0]["stdoutTail"] == "hi\n"
    assert body["counts"]["succeeded"] == 1 and body["counts"]["cancelled"] == 2
    assert body["done"] == 3 and body["status"] == "completed"
    fresh = _fresh(store, "r1")
    assert {**body, "durationSeconds": 0} == {**fresh, "durationSeconds": 0}
    lines = [json.loads(line) for line in view.results().splitlines()]
    assert lines == body["sandboxes"]


def test_views_are_private_to_their_account(store: Store) -> None:
    _start(store, "r1", 1, account="alice")
    runs = Runs(store, ISOLATION)
    assert runs.get("r1", Owner("bob")) is None
    assert runs.get("r1", Owner("alice")) is not None
    assert runs.get("nope") is None


def test_a_sandbox_key_reaches_only_what_its_sandbox_made(store: Store) -> None:
    _start(store, "top", 1, account="alice")
    _start(store, "child", 1, account="alice", lineage="/sbx-a/")
    _start(store, "grandchild", 1, account="alice", lineage="/sbx-a/sbx-c/")
    runs = Runs(store, ISOLATION)
    reach = {
        lineage: [s["id"] for s in runs.summaries(Owner("alice", lineage))]
        for lineage in ("/", "/sbx-a/", "/sbx-a/sbx-c/", "/sbx-b/")
    }
    assert reach == {
        "/": ["grandchild", "child", "top"],
        "/sbx-a/": ["grandchild", "child"],
        "/sbx-a/sbx-c/": ["grandchild"],
        "/sbx-b/": [],
    }
    assert runs.get("child", Owner("alice", "/sbx-a/")) is not None
    assert runs.get("child", Owner("alice", "/sbx-a/sbx-c/")) is None
    assert runs.get("top", Owner("alice", "/sbx-a/")) is None
    assert runs.get("child", Owner("bob", "/sbx-a/")) is None
    assert runs.sandbox("sbx-child0", Owner("alice", "/sbx-a/")) is not None
    assert runs.sandbox("sbx-top0", Owner("alice", "/sbx-a/")) is None


def test_completed_runs_leave_memory_first_and_come_back_unchanged(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_runs, "_CACHE_BYTES", 0)
    _start(store, "done", 2)
    _start(store, "live", 2)
    runs = Runs(store, ISOLATION)
    done = runs.get("done")
    assert done is not None
    runs.set_ended("done", 0, Outcome("succeeded", stdout_tail="kept\n"))
    runs.set_completed("done")
    before = json.loads(done.body())
    live = runs.get("live")  # loading it evicts the completed run, never the live one
    assert live is not None
    runs.set_ended("done", 1, Outcome("failed"))  # not in memory: SQLite alone
    again = runs.get("done")
    assert again is not None and again is not done
    after = json.loads(again.body())
    assert after["sandboxes"][0] == before["sandboxes"][0]
    assert after["sandboxes"][1]["status"] == "failed"
    assert runs.get("live") is live


def test_summaries_list_newest_first_with_counts(store: Store) -> None:
    _start(store, "old", 1)
    _start(store, "new", 2)
    runs = Runs(store, ISOLATION)
    runs.get("new")  # one in memory, one read from SQLite
    summaries = runs.summaries(Owner("acct"))
    assert [s["id"] for s in summaries] == ["new", "old"]
    assert [s["counts"]["queued"] for s in summaries] == [2, 1]
    assert all("sandboxes" not in s for s in summaries)


def test_a_run_spec_comes_back_from_sqlite_as_it_went_in(store: Store) -> None:
    spec = RunSpec(("python", "-c", "print(1)"), Size(4, 8), 30, "python", "/tmp/out")
    run = RunRecord("typed", "acct", "/", "lease-1", "n", spec, 1, 1, time.time())
    item = SandboxInput(("a", "b c"), {"X": "1"}, {"/tmp/f": "text"})
    store.insert_run(run, [item], ["sbx-typed0"], None)
    assert store.run("typed") == run
    assert store.sandbox_input("typed", 0) == ("sbx-typed0", item)
    assert spec.argv(item) == ["python", "-c", "print(1)", "a", "b c"]
