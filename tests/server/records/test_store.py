"""The store: checkpoints off the event loop, nothing committed lost without them, and
databases of other versions migrated or refused."""

from __future__ import annotations

import gc
import json
import os
import re
import sqlite3
import threading
import time
from pathlib import Path

import anyio
import pytest

from inspect_swarm.cli._main import main
from inspect_swarm.client import AuthenticationError
from inspect_swarm.server._serve import assemble
from inspect_swarm.server.domain import _server
from inspect_swarm.server.edge._auth import account_of
from inspect_swarm.server.model._types import (
    Account,
    RunRecord,
    RunSpec,
    SandboxInput,
    Settings,
    Size,
)
from inspect_swarm.server.records._store import SCHEMA_VERSION, Store
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost

from ...servers import KEY, needs_namespaces, start_server


def _write_pages(store: Store, runs: int) -> None:
    """Commit a few thousand pages: runs of 100 sandboxes, 4 KB of input each."""
    spec = RunSpec("true", Size(1, 1), 600, "base", None)
    for n in range(runs):
        run = RunRecord(f"run-{n}", "acct_test", "/", "lease-test", None, spec, 100, 1, time.time())
        inputs = [SandboxInput(("x" * 4096,)) for _ in range(100)]
        store.insert_run(run, inputs, [f"sbx-{n}-{i}" for i in range(100)], None)


def test_writes_never_checkpoint_and_lose_nothing_without_one(tmp_path: Path) -> None:
    path = tmp_path / "swarm.db"
    store = Store(path)
    try:
        empty = path.stat().st_size
        _write_pages(store, 12)  # SQLite's own checkpoints would come every ~1000 pages
        assert path.stat().st_size == empty
        assert os.path.getsize(f"{path}-wal") > 4 * 1024**2
        # what a server killed now would find on restart
        reader = Store(path)
        assert len(reader.runs()) == 12 and len(reader.sandboxes("run-11")) == 100
        reader.close()
        assert path.stat().st_size == empty  # not the last connection: no checkpoint
        store.checkpoint()
        assert path.stat().st_size > 4 * 1024**2
    finally:
        store.close()


@pytest.mark.anyio
async def test_the_server_checkpoints_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path, "process"))
    domain = assemble(store, host, Settings(2))
    threads: list[int] = []
    checkpoint = store.checkpoint
    twice = anyio.Event()

    def recorded() -> None:
        threads.append(threading.get_ident())
        checkpoint()
        if len(threads) == 2:
            anyio.from_thread.run_sync(twice.set)

    monkeypatch.setattr(store, "checkpoint", recorded)
    monkeypatch.setattr(_server, "_CHECKPOINT_SECONDS", 0.01)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                await tg.start(domain.serve)
                _write_pages(store, 3)
                await twice.wait()
                tg.cancel_scope.cancel()
        assert threading.get_ident() not in threads
        assert (tmp_path / "swarm.db").stat().st_size > 1024**2  # the pages reached the file
    finally:
        gc.unfreeze()
        host.cgroups.remove_base()
        store.close()


# what the first version of the store made (keys in plain text, no lineage)
_V0_SCHEMA = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL, account TEXT NOT NULL, lease_id TEXT NOT NULL,
    name TEXT, spec TEXT NOT NULL, count INTEGER NOT NULL, concurrency INTEGER NOT NULL,
    status TEXT NOT NULL, waiting_reason TEXT, error TEXT,
    created_at REAL NOT NULL, ended_at REAL
);
CREATE TABLE sandboxes (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, sandbox_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL, input TEXT NOT NULL, exit_code INTEGER,
    stdout_tail TEXT, stderr_tail TEXT, result TEXT, result_encoding TEXT, error TEXT,
    started_at REAL, ended_at REAL, PRIMARY KEY (run_id, idx)
);
CREATE TABLE idempotency (
    account TEXT NOT NULL, key TEXT NOT NULL, body_hash TEXT NOT NULL, run_id TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (account, key)
);
CREATE TABLE leases (
    id TEXT PRIMARY KEY, account TEXT NOT NULL, api_key TEXT NOT NULL UNIQUE,
    started_at REAL NOT NULL, released_at REAL, release_reason TEXT
);
CREATE TABLE long_lived (
    sandbox_id TEXT PRIMARY KEY, account TEXT NOT NULL, lease_id TEXT NOT NULL,
    template TEXT NOT NULL, vcpus INTEGER NOT NULL, memory_gb INTEGER NOT NULL,
    metadata TEXT NOT NULL, started_at REAL NOT NULL, end_at REAL NOT NULL,
    ended_at REAL, end_reason TEXT
);
"""
_OPEN_KEY, _ENDED_KEY = "mlk_plain-key-of-an-open-lease", "mlk_plain-key-of-an-ended-lease"


def _v0_database(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(_V0_SCHEMA)
    now, account = time.time(), account_of(KEY)
    spec = {"command": "true", "size": {"name": "custom", "vcpus": 1, "memoryGb": 1}}
    spec |= {"timeoutSeconds": 600, "template": "base", "resultPath": None}
    db.executemany(
        "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?)",
        [
            ("lease-ended", account, _ENDED_KEY, now - 60, now - 30, "released"),
            ("lease-open", account, _OPEN_KEY, now, None, None),
        ],
    )
    db.execute(
        "INSERT INTO runs VALUES ('run-old', 1, ?, 'lease-open', NULL, ?, 1, 1, 'completed',"
        " NULL, NULL, ?, ?)",
        (account, json.dumps(spec), now, now),
    )
    db.execute(
        "INSERT INTO sandboxes (run_id, idx, sandbox_id, status, input, exit_code, ended_at)"
        " VALUES ('run-old', 0, 'sbx-old', 'succeeded', '{}', 0, ?)",
        (now,),
    )
    db.execute(
        "INSERT INTO long_lived VALUES ('sbx-lived', ?, 'lease-open', 'base', 1, 1, '{}', ?, ?,"
        " ?, 'killed')",
        (account, now, now, now),
    )
    db.commit()
    db.close()


@needs_namespaces
def test_a_database_of_the_first_version_is_migrated_with_its_keys_hashed(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = state / "swarm.db"
    _v0_database(path)
    path.chmod(0o644)
    server = start_server(state, "--memory-gib", "2")
    try:
        with server.client(_OPEN_KEY) as holder:  # the open lease's key still works
            assert holder.servers.list()["lease"]["id"] == "lease-open"
            old = holder.swarms.get("run-old")["sandboxes"][0]
            assert (old["status"], old["node"]) == ("succeeded", None)  # node: version 2
            assert holder.sandboxes.get("sbx-lived")["endReason"] == "killed"
        with server.client(_ENDED_KEY) as thief, pytest.raises(AuthenticationError):
            thief.swarms.list()
        stored = b"".join(Path(f"{path}{suffix}").read_bytes() for suffix in ("", "-wal", "-shm"))
        assert _OPEN_KEY.encode() not in stored and _ENDED_KEY.encode() not in stored
        assert (path.stat().st_mode & 0o777) == 0o600
        with server.client() as client:
            client.servers.release()
    finally:
        server.kill()


def test_a_database_of_a_later_version_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "swarm.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    later = f"schema version {SCHEMA_VERSION + 1}, newer than this server's ({SCHEMA_VERSION})"
    with pytest.raises(ValueError, match=re.escape(later)):
        Store(path)
    assert main(["server", "--state-dir", str(tmp_path), "--port", "0"]) == 1
    assert later in capsys.readouterr().err


def test_accounts_of_an_earlier_version_are_added_and_kept_by_their_keys_hash(
    tmp_path: Path,
) -> None:
    path = tmp_path / "swarm.db"
    Store(path).close()
    db = sqlite3.connect(path)  # a database of version 2, before accounts
    db.execute("DROP TABLE accounts")
    db.execute("PRAGMA user_version = 2")
    db.close()
    store = Store(path)
    team = Account("acct_team", "team", frozenset({"read"}), {"max_running": 2}, 1.0)
    store.insert_account(team, "isk_secret")
    store.close()
    store = Store(path)
    try:
        assert store.account_of_key("isk_secret") == team == store.account("team")
        assert store.account_of_key("isk_other") is None
        store.set_account_key("team", "isk_new")
        assert store.account_of_key("isk_secret") is None
        rotated = store.account_of_key("isk_new")
        assert rotated is not None and rotated.id == team.id and rotated.rotated_at is not None
    finally:
        store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"isk_secret" not in stored and b"isk_new" not in stored
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
