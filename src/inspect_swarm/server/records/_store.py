"""Durable state in SQLite: runs, sandboxes, results, idempotency keys, leases, the records
of long-lived sandboxes (those made outside runs), the accounts added while a server runs,
and the hashes of the keys given out.

Every change is committed at once (WAL, synchronous=NORMAL), so a server killed at any point
restarts with everything that had finished. The server's event loop is the only writer.

Committing to the WAL costs no fsync; copying the WAL into the database file (a checkpoint)
costs two, 5-8 ms, which SQLite would do on the committing thread every 1000 pages or so.
So the writer never checkpoints: `checkpoint`, on a connection of its own, is for a worker
thread (the engine's runs it every second). A checkpoint moves what is committed already and
durable in the WAL; a server killed before one loses nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..._swarms_api import START_FIELDS
from ..model._keys import ROOT, Owner, key_hash
from ..model._types import (
    STATUSES,
    Account,
    KeyRecord,
    Lease,
    LongLivedRecord,
    RunRecord,
    RunSpec,
    SandboxInput,
    SandboxRecord,
    Size,
    SnapshotRecord,
)
from ._wire import spec_object

SCHEMA_VERSION = 4
"""1: keys stored hashed in `keys` (version 0 kept lease keys in `leases.api_key`), and
the lineage of every run and long-lived sandbox. 2: the `node` each sandbox ran on (the Ray
engine's; null on this machine's). 3: `accounts`, those added while the server runs.
4: `snapshots`, of long-lived sandboxes' files."""

_LEASE_COLUMNS = """id TEXT PRIMARY KEY, account TEXT NOT NULL,
    started_at REAL NOT NULL, released_at REAL, release_reason TEXT"""

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL, account TEXT NOT NULL, lease_id TEXT NOT NULL,
    name TEXT, spec TEXT NOT NULL, count INTEGER NOT NULL, concurrency INTEGER NOT NULL,
    status TEXT NOT NULL, waiting_reason TEXT, error TEXT,
    created_at REAL NOT NULL, ended_at REAL, lineage TEXT NOT NULL DEFAULT '/'
);
CREATE TABLE IF NOT EXISTS sandboxes (
    run_id TEXT NOT NULL, idx INTEGER NOT NULL, sandbox_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL, input TEXT NOT NULL, exit_code INTEGER,
    stdout_tail TEXT, stderr_tail TEXT, result TEXT, result_encoding TEXT, error TEXT,
    started_at REAL, ended_at REAL, node TEXT, PRIMARY KEY (run_id, idx)
);
CREATE TABLE IF NOT EXISTS idempotency (
    account TEXT NOT NULL, key TEXT NOT NULL, body_hash TEXT NOT NULL, run_id TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY (account, key)
);
CREATE TABLE IF NOT EXISTS leases ({_LEASE_COLUMNS});
CREATE TABLE IF NOT EXISTS keys (
    hash TEXT PRIMARY KEY, account TEXT NOT NULL, lease_id TEXT NOT NULL, sandbox_id TEXT,
    lineage TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS long_lived (
    sandbox_id TEXT PRIMARY KEY, account TEXT NOT NULL, lease_id TEXT NOT NULL,
    template TEXT NOT NULL, vcpus INTEGER NOT NULL, memory_gb INTEGER NOT NULL,
    metadata TEXT NOT NULL, started_at REAL NOT NULL, end_at REAL NOT NULL,
    ended_at REAL, end_reason TEXT, lineage TEXT NOT NULL DEFAULT '/', node TEXT
);
CREATE TABLE IF NOT EXISTS accounts (
    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, key_hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL, quotas TEXT NOT NULL, created_at REAL NOT NULL, rotated_at REAL
);
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY, account TEXT NOT NULL, lineage TEXT NOT NULL, name TEXT,
    sandbox_id TEXT NOT NULL, template TEXT NOT NULL, created_at REAL NOT NULL,
    bytes INTEGER NOT NULL, storage TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sandboxes_status ON sandboxes (status);
CREATE INDEX IF NOT EXISTS runs_account ON runs (account, seq);
CREATE INDEX IF NOT EXISTS runs_seq ON runs (seq);
CREATE INDEX IF NOT EXISTS idempotency_run ON idempotency (run_id);
CREATE INDEX IF NOT EXISTS keys_lease ON keys (lease_id);
CREATE INDEX IF NOT EXISTS keys_sandbox ON keys (sandbox_id);
"""


class Store:
    """The server's SQLite database."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        _owner_only(path)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        try:
            _migrate(self._db, path)
        except ValueError:
            self._db.close()
            raise
        self._checkpointer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def close(self) -> None:
        """Close the database (the last connection to close checkpoints what is left)."""
        self._checkpointer.close()
        self._db.close()

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file, without waiting for the
        writer; blocks for its fsyncs, so call it from a worker thread, one call at a time."""
        self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _write(self, sql: str, params: Iterable[Any] = ()) -> None:
        self._db.execute(sql, tuple(params))

    # runs

    def insert_run(
        self,
        run: RunRecord,
        inputs: Sequence[SandboxInput],
        sandbox_ids: Sequence[str],
        idempotency: tuple[str, str, str] | None,
    ) -> None:
        """Add a run with its queued sandboxes (and its idempotency key) in one transaction."""
        with self._db:
            self._db.execute("BEGIN")
            seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM runs").fetchone()[0]
            self._write(
                "INSERT INTO runs (id, seq, account, lease_id, name, spec, count, concurrency,"
                " status, created_at, lineage) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.id,
                    seq,
                    run.account,
                    run.lease_id,
                    run.name,
                    _spec_json(run.spec),
                    len(inputs),
                    run.concurrency,
                    run.status,
                    run.created_at,
                    run.lineage,
                ),
            )
            self._db.executemany(
                "INSERT INTO sandboxes (run_id, idx, sandbox_id, status, input)"
                " VALUES (?, ?, ?, 'queued', ?)",
                [
                    (run.id, i, sid, _input_json(item))
                    for i, (sid, item) in enumerate(zip(sandbox_ids, inputs, strict=True))
                ],
            )
            if idempotency is not None:
                account, key, digest = idempotency
                self._write(
                    "INSERT INTO idempotency VALUES (?, ?, ?, ?, ?)",
                    (account, key, digest, run.id, run.created_at),
                )

    def run(self, run_id: str, owner: Owner | None = None) -> RunRecord | None:
        """One run (within `owner`'s reach, when given)."""
        row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None or (owner is not None and not owner.owns(row["account"], row["lineage"])):
            return None
        return _run(row)

    def runs(self, owner: Owner | None = None) -> list[RunRecord]:
        """Runs, newest first (within `owner`'s reach; every account's when None)."""
        if owner is None:
            rows = self._db.execute("SELECT * FROM runs ORDER BY seq DESC").fetchall()
        else:
            rows = self._db.execute(
                "SELECT * FROM runs WHERE account = ? AND substr(lineage, 1, ?) = ?"
                " ORDER BY seq DESC",
                (owner.account, len(owner.lineage), owner.lineage),
            ).fetchall()
        return [_run(row) for row in rows]

    def update_run(self, run_id: str, fields: Mapping[str, Any]) -> None:
        """Set fields of a run (by column name)."""
        names = ", ".join(f"{name} = ?" for name in fields)
        self._write(f"UPDATE runs SET {names} WHERE id = ?", (*fields.values(), run_id))

    def counts(self, run_id: str) -> dict[str, int]:
        """How many of the run's sandboxes are in each status."""
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for status, n in self._db.execute(
            "SELECT status, COUNT(*) FROM sandboxes WHERE run_id = ? GROUP BY status", (run_id,)
        ):
            counts[status] = n
        return counts

    def queued(self, account: str) -> int:
        """How many sandboxes of the account's unfinished runs wait to start."""
        row = self._db.execute(
            "SELECT COUNT(*) FROM sandboxes WHERE status = 'queued' AND run_id IN "
            "(SELECT id FROM runs WHERE account = ? AND status != 'completed')",
            (account,),
        ).fetchone()
        return int(row[0])

    def at_once(self, account: str) -> tuple[int, int]:
        """How many of the account's sandboxes may run at once, and the GB they book: its
        live long-lived sandboxes, and of each unfinished run as many as its concurrency
        lets run of those not yet ended."""
        running, booked = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(memory_gb), 0) FROM long_lived"
            " WHERE account = ? AND ended_at IS NULL",
            (account,),
        ).fetchone()
        rows = self._db.execute(
            "SELECT runs.spec, runs.concurrency, COUNT(*) FROM runs JOIN sandboxes"
            " ON sandboxes.run_id = runs.id AND sandboxes.status IN ('queued', 'booting',"
            " 'running') WHERE runs.account = ? AND runs.status != 'completed' GROUP BY runs.id",
            (account,),
        ).fetchall()
        for spec, concurrency, live in rows:
            at_once = min(concurrency, live)
            running += at_once
            booked += at_once * _spec(spec).size.memory_gb
        return int(running), int(booked)

    # sandboxes

    def sandboxes(self, run_id: str, status: str | None = None) -> list[SandboxRecord]:
        """The run's sandboxes in input order (only those in `status`, when given)."""
        if status is None:
            rows = self._db.execute(
                f"SELECT {_SANDBOX_COLUMNS} FROM sandboxes WHERE run_id = ? ORDER BY idx",
                (run_id,),
            ).fetchall()
        else:
            rows = self._db.execute(
                f"SELECT {_SANDBOX_COLUMNS} FROM sandboxes WHERE run_id = ? AND status = ?"
                " ORDER BY idx",
                (run_id, status),
            ).fetchall()
        return [SandboxRecord(*row) for row in rows]

    def sandbox_input(self, run_id: str, idx: int) -> tuple[str, SandboxInput]:
        """The id and the input of the sandbox of a run at input index `idx`."""
        sandbox_id, text = self._db.execute(
            "SELECT sandbox_id, input FROM sandboxes WHERE run_id = ? AND idx = ?", (run_id, idx)
        ).fetchone()
        item = json.loads(text)
        return sandbox_id, SandboxInput(tuple(item["args"]), item["env"], item["files"])

    def sandbox(self, sandbox_id: str) -> SandboxRecord | None:
        """One sandbox of a run by its `sbx-` id."""
        row = self._db.execute(
            f"SELECT {_SANDBOX_COLUMNS} FROM sandboxes WHERE sandbox_id = ?", (sandbox_id,)
        ).fetchone()
        return None if row is None else SandboxRecord(*row)

    def update_sandbox(self, run_id: str, idx: int, fields: Mapping[str, Any]) -> None:
        """Set fields of a sandbox (by column name)."""
        names = ", ".join(f"{name} = ?" for name in fields)
        self._write(
            f"UPDATE sandboxes SET {names} WHERE run_id = ? AND idx = ?",
            (*fields.values(), run_id, idx),
        )

    def end_sandboxes(self, run_id: str, from_status: str, fields: Mapping[str, Any]) -> None:
        """Set fields (a new status) of every sandbox of a run in `from_status`."""
        names = ", ".join(f"{name} = ?" for name in fields)
        self._write(
            f"UPDATE sandboxes SET {names} WHERE run_id = ? AND status = ?",
            (*fields.values(), run_id, from_status),
        )

    def fail_interrupted(self, reason: str) -> None:
        """Fail every sandbox that was booting or running when the server stopped."""
        self._write(
            "UPDATE sandboxes SET status = 'failed', error = ?, ended_at = ?"
            " WHERE status IN ('booting', 'running')",
            (reason, time.time()),
        )

    def unfinished_runs(self) -> list[RunRecord]:
        """Runs not yet completed, oldest first."""
        rows = self._db.execute(
            "SELECT * FROM runs WHERE status != 'completed' ORDER BY seq"
        ).fetchall()
        return [_run(row) for row in rows]

    def purge(self, before: float) -> None:
        """Forget runs (and their sandboxes and keys) that ended before `before`."""
        with self._db:
            self._db.execute("BEGIN")
            old = [
                r[0]
                for r in self._db.execute(
                    "SELECT id FROM runs WHERE ended_at IS NOT NULL AND ended_at < ?", (before,)
                )
            ]
            for run_id in old:
                for table in ("sandboxes", "idempotency"):
                    self._write(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                self._write("DELETE FROM runs WHERE id = ?", (run_id,))
            self._write("DELETE FROM long_lived WHERE ended_at < ?", (before,))

    # long-lived sandboxes

    def insert_long_lived(self, record: LongLivedRecord) -> None:
        """Record a long-lived sandbox."""
        self._write(
            "INSERT INTO long_lived (sandbox_id, account, lineage, lease_id, template, vcpus,"
            " memory_gb, metadata, started_at, end_at, ended_at, end_reason, node)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.sandbox_id,
                record.account,
                record.lineage,
                record.lease_id,
                record.template,
                record.size.vcpus,
                record.size.memory_gb,
                json.dumps(record.metadata),
                record.started_at,
                record.end_at,
                record.ended_at,
                record.end_reason,
                record.node,
            ),
        )

    def long_lived(self, sandbox_id: str, owner: Owner) -> LongLivedRecord | None:
        """The record of a long-lived sandbox within `owner`'s reach."""
        row = self._db.execute(
            "SELECT * FROM long_lived WHERE sandbox_id = ?", (sandbox_id,)
        ).fetchone()
        if row is None or not owner.owns(row["account"], row["lineage"]):
            return None
        return LongLivedRecord(
            row["sandbox_id"],
            row["account"],
            row["lineage"],
            row["lease_id"],
            row["template"],
            Size(row["vcpus"], row["memory_gb"]),
            json.loads(row["metadata"]),
            row["started_at"],
            row["end_at"],
            row["ended_at"],
            row["end_reason"],
            row["node"],
        )

    def update_long_lived(self, sandbox_id: str, fields: Mapping[str, Any]) -> None:
        """Set fields of a long-lived sandbox's record (by column name)."""
        names = ", ".join(f"{name} = ?" for name in fields)
        self._write(
            f"UPDATE long_lived SET {names} WHERE sandbox_id = ?", (*fields.values(), sandbox_id)
        )

    def end_long_lived(self, reason: str) -> None:
        """End the record of every long-lived sandbox still open (when the server starts)."""
        self._write(
            "UPDATE long_lived SET ended_at = ?, end_reason = ? WHERE ended_at IS NULL",
            (time.time(), reason),
        )

    # snapshots

    def put_snapshot(self, record: SnapshotRecord) -> None:
        """Record a snapshot, or its new copy (a snapshot of the same id replaced)."""
        names = [f.name for f in dataclasses.fields(SnapshotRecord)]
        self._write(
            f"INSERT OR REPLACE INTO snapshots ({', '.join(names)})"
            f" VALUES ({', '.join('?' * len(names))})",
            dataclasses.astuple(record),
        )

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Forget a deleted snapshot."""
        self._write("DELETE FROM snapshots WHERE id = ?", (snapshot_id,))

    def snapshots(self) -> list[SnapshotRecord]:
        """Every snapshot, oldest first."""
        rows = self._db.execute("SELECT * FROM snapshots ORDER BY created_at").fetchall()
        return [SnapshotRecord(**dict(row)) for row in rows]

    # idempotency

    def idempotent(self, namespace: str, key: str) -> tuple[str, str] | None:
        """The run an idempotency key of `namespace` (see `Owner`) started, and the hash of
        the request that started it."""
        row = self._db.execute(
            "SELECT run_id, body_hash FROM idempotency WHERE account = ? AND key = ?",
            (namespace, key),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    # leases

    def open_lease(self) -> Lease | None:
        """The lease that holds this server now, if any."""
        row = self._db.execute("SELECT * FROM leases WHERE released_at IS NULL").fetchone()
        return _lease(row)

    def lease(self, lease_id: str) -> Lease | None:
        """One lease by id."""
        return _lease(self._db.execute("SELECT * FROM leases WHERE id = ?", (lease_id,)).fetchone())

    def insert_lease(self, lease: Lease) -> None:
        """Record a new open lease."""
        self._write(
            "INSERT INTO leases (id, account, started_at) VALUES (?, ?, ?)",
            (lease.id, lease.account, lease.started_at),
        )

    def release_lease(self, lease_id: str, reason: str) -> None:
        """End a lease."""
        self._write(
            "UPDATE leases SET released_at = ?, release_reason = ? WHERE id = ?",
            (time.time(), reason, lease_id),
        )

    # accounts added while the server runs (only their keys' hashes)

    def insert_account(self, account: Account, key: str) -> None:
        """Record a new account with its key."""
        self._write(
            "INSERT INTO accounts VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                account.id,
                account.name,
                key_hash(key),
                ",".join(sorted(account.scopes)),
                json.dumps(dict(account.quotas)),
                account.created_at,
                account.rotated_at,
            ),
        )

    def accounts(self) -> list[Account]:
        """Every account added, oldest first."""
        rows = self._db.execute("SELECT * FROM accounts ORDER BY created_at").fetchall()
        return [_account(row) for row in rows]

    def account(self, name: str) -> Account | None:
        """The account of that name."""
        return self._account_where("name", name)

    def account_of_key(self, key: str) -> Account | None:
        """The account whose key this is."""
        return self._account_where("key_hash", key_hash(key))

    def account_by_id(self, account_id: str) -> Account | None:
        """The account of that id."""
        return self._account_where("id", account_id)

    def _account_where(self, column: str, value: str) -> Account | None:
        row = self._db.execute(f"SELECT * FROM accounts WHERE {column} = ?", (value,)).fetchone()
        return None if row is None else _account(row)

    def set_account_key(self, name: str, key: str) -> None:
        """Give an account a new key: the one before stops working."""
        self._write(
            "UPDATE accounts SET key_hash = ?, rotated_at = ? WHERE name = ?",
            (key_hash(key), time.time(), name),
        )

    def set_account_quotas(self, name: str, quotas: Mapping[str, int]) -> None:
        """Give an account its own quotas (those it had are replaced)."""
        self._write(
            "UPDATE accounts SET quotas = ? WHERE name = ?", (json.dumps(dict(quotas)), name)
        )

    def delete_account(self, name: str) -> None:
        """Forget an account (its runs' records stay, as every account's do)."""
        self._write("DELETE FROM accounts WHERE name = ?", (name,))

    # keys (only their hashes)

    def insert_key(
        self, key: str, account: str, lease_id: str, sandbox_id: str | None, lineage: str
    ) -> None:
        """Record a key: a lease key (no `sandbox_id`) or a sandbox's, reaching `lineage`."""
        self._write(
            "INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?)",
            (key_hash(key), account, lease_id, sandbox_id, lineage, time.time()),
        )

    def key(self, key: str) -> KeyRecord | None:
        """The record of a key of an open lease (None for any other)."""
        row = self._db.execute(
            "SELECT keys.account, keys.lease_id, keys.sandbox_id, keys.lineage FROM keys"
            " JOIN leases ON leases.id = keys.lease_id"
            " WHERE keys.hash = ? AND leases.released_at IS NULL",
            (key_hash(key),),
        ).fetchone()
        return None if row is None else KeyRecord(*row)

    def revoke_lease_keys(self, lease_id: str) -> None:
        """Forget every key of a lease."""
        self._write("DELETE FROM keys WHERE lease_id = ?", (lease_id,))

    def revoke_lease_key(self, lease_id: str) -> None:
        """Forget a lease's own key (its sandboxes' keep working)."""
        self._write("DELETE FROM keys WHERE lease_id = ? AND sandbox_id IS NULL", (lease_id,))

    def revoke_sandbox_keys(self, sandbox_id: str | None = None) -> None:
        """Forget a sandbox's key (every sandbox's when None: none outlives a restart)."""
        if sandbox_id is None:
            self._write("DELETE FROM keys WHERE sandbox_id IS NOT NULL")
        else:
            self._write("DELETE FROM keys WHERE sandbox_id = ?", (sandbox_id,))


def _owner_only(path: Path) -> None:
    """Make the database, and its WAL and shared-memory files if any, readable by the owner
    only (SQLite gives the files it makes the database's mode)."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if name.exists():
            os.chmod(name, 0o600)


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring a database of an earlier version up to this one (or refuse a later one)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"{path}: the database is of schema version {version}, newer than this server's "
            f"({SCHEMA_VERSION}); run the newer inspect-swarm on it, or use another --state-dir"
        )
    earlier = _columns(db, "runs") != set()
    db.executescript(_SCHEMA)
    if earlier and version < 1:
        _to_version_1(db)
    for table in ("sandboxes", "long_lived"):
        if earlier and "node" not in _columns(db, table):
            # version 2: the node each sandbox ran on (engines of more than one machine)
            db.execute(f"ALTER TABLE {table} ADD COLUMN node TEXT")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row["name"] for row in db.execute(f"PRAGMA table_info({table})")}


def _to_version_1(db: sqlite3.Connection) -> None:
    """Give runs and long-lived sandboxes a lineage, and keep only hashes of lease keys."""
    db.execute("PRAGMA secure_delete = ON")  # the plain keys' bytes are zeroed, not only freed
    with db:
        db.execute("BEGIN")
        for table in ("runs", "long_lived"):
            if "lineage" not in _columns(db, table):
                db.execute(f"ALTER TABLE {table} ADD COLUMN lineage TEXT NOT NULL DEFAULT '/'")
        if "api_key" in _columns(db, "leases"):
            for lease in db.execute("SELECT * FROM leases WHERE released_at IS NULL").fetchall():
                db.execute(
                    "INSERT INTO keys VALUES (?, ?, ?, NULL, ?, ?)",
                    (
                        key_hash(lease["api_key"]),
                        lease["account"],
                        lease["id"],
                        ROOT,
                        lease["started_at"],
                    ),
                )
            db.execute(f"CREATE TABLE leases_v1 ({_LEASE_COLUMNS})")
            db.execute(
                "INSERT INTO leases_v1 SELECT id, account, started_at, released_at, release_reason"
                " FROM leases"
            )
            db.execute("DROP TABLE leases")
            db.execute("ALTER TABLE leases_v1 RENAME TO leases")
    # nothing of the old table left in free pages or the WAL
    db.execute("VACUUM")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA secure_delete = OFF")


_SANDBOX_COLUMNS = (
    "run_id, idx, sandbox_id, status, exit_code, stdout_tail, stderr_tail, result,"
    " result_encoding, error, started_at, ended_at, node"
)
"""The columns of `SandboxRecord`, in its order."""


def _spec_json(spec: RunSpec) -> str:
    """A run's spec as stored: by the start's wire names, as the API shows it."""
    return json.dumps(spec_object(spec))


def _spec(text: str) -> RunSpec:
    spec = json.loads(text)

    def stored(name: str) -> Any:
        return spec[START_FIELDS[name].wire]

    command, size = stored("command"), stored("size")
    return RunSpec(
        command if isinstance(command, str) else tuple(command),
        Size(size["vcpus"], size["memoryGb"]),
        stored("timeout_seconds"),
        stored("template"),
        stored("result_path"),
    )


def _input_json(item: SandboxInput) -> str:
    return json.dumps({"args": list(item.args), "env": item.env, "files": item.files})


def _run(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"],
        account=row["account"],
        lineage=row["lineage"],
        lease_id=row["lease_id"],
        name=row["name"],
        spec=_spec(row["spec"]),
        count=row["count"],
        concurrency=row["concurrency"],
        created_at=row["created_at"],
        status=row["status"],
        waiting_reason=row["waiting_reason"],
        error=row["error"],
        ended_at=row["ended_at"],
    )


def _account(row: sqlite3.Row) -> Account:
    return Account(
        row["id"],
        row["name"],
        frozenset(row["scopes"].split(",")),
        json.loads(row["quotas"]),
        row["created_at"],
        row["rotated_at"],
    )


def _lease(row: sqlite3.Row | None) -> Lease | None:
    if row is None:
        return None
    return Lease(
        row["id"],
        row["account"],
        row["started_at"],
        row["released_at"],
        row["release_reason"],
    )
