"""The store's checkpoints: off the event loop, and nothing committed lost without them."""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server import _engine
from inspect_swarm.server._engine import Engine, Settings
from inspect_swarm.server._isolation import IsolationConfig, SandboxHost
from inspect_swarm.server._store import Store


def _write_pages(store: Store, runs: int) -> None:
    """Commit a few thousand pages: runs of 100 sandboxes, 4 KB of input each."""
    for n in range(runs):
        run = {
            "id": f"run-{n}",
            "account": "acct_test",
            "lease_id": "lease-test",
            "name": None,
            "spec": {},
            "concurrency": 1,
            "created_at": time.time(),
        }
        inputs = [{"args": ["x" * 4096]} for _ in range(100)]
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
async def test_the_engine_checkpoints_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "swarm.db")
    engine = Engine(store, SandboxHost(IsolationConfig(tmp_path, "process")), Settings(2))
    threads: list[int] = []
    checkpoint = store.checkpoint
    twice = anyio.Event()

    def recorded() -> None:
        threads.append(threading.get_ident())
        checkpoint()
        if len(threads) == 2:
            anyio.from_thread.run_sync(twice.set)

    monkeypatch.setattr(store, "checkpoint", recorded)
    monkeypatch.setattr(_engine, "_CHECKPOINT_SECONDS", 0.01)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                await tg.start(engine.serve)
                _write_pages(store, 3)
                await twice.wait()
                tg.cancel_scope.cancel()
        assert threading.get_ident() not in threads
        assert (tmp_path / "swarm.db").stat().st_size > 1024**2  # the pages reached the file
    finally:
        gc.unfreeze()
        engine.host.cgroups.remove_base()
        store.close()
