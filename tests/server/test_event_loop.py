"""What takes the kernel a while is done on worker threads, never on the event loop, whose
stall would hold up every request (the API's latency under load)."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from inspect_swarm.server._serve import assemble
from inspect_swarm.server.domain._server import SwarmServer
from inspect_swarm.server.edge._schema import start_request
from inspect_swarm.server.model._keys import Owner
from inspect_swarm.server.model._types import Settings
from inspect_swarm.server.records._runs import Runs
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes import _isolation
from inspect_swarm.server.sandboxes._cgroups import Cgroups, Limits
from inspect_swarm.server.sandboxes._forward import Forwarder
from inspect_swarm.server.sandboxes._isolation import (
    IsolationConfig,
    NamespaceSandbox,
    Sandbox,
    SandboxHost,
)

from ..servers import needs_namespaces
from .engines.test_sandboxes import local, run_to_completion

__all__ = ["local"]  # a fixture

pytestmark = [needs_namespaces, pytest.mark.anyio]


class Threads:
    """The threads that ran each of some functions."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.ran: dict[str, set[int]] = {}

    def watch(self, owner: object, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)
        ran = self.ran.setdefault(name, set())

        def recorded(*args: Any, **kwargs: Any) -> Any:
            ran.add(threading.get_ident())
            return original(*args, **kwargs)

        self._monkeypatch.setattr(owner, name, recorded)

    def on_the_loop(self) -> Iterator[str]:
        """The functions that ran on this (the event loop's) thread, at least once."""
        loop = threading.get_ident()
        return (name for name, threads in self.ran.items() if loop in threads)


@pytest.fixture
async def forwarding_host(tmp_path: Path) -> AsyncIterator[SandboxHost]:
    """A host whose sandboxes have a listener forwarding to the server (a port nobody uses)."""
    config = IsolationConfig(tmp_path / "state", forward=("127.0.0.1", 9))
    host = SandboxHost(config)
    host.reap_leftovers()
    yield host
    await host.aclose()
    host.reap_leftovers()
    host.cgroups.remove_base()


async def test_a_sandbox_is_made_and_ended_off_the_event_loop(
    forwarding_host: SandboxHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = Threads(monkeypatch)
    for owner, name in [
        (Cgroups, "create"),  # cgroupfs: a mkdir and its limits written
        (Cgroups, "recycle"),  # cgroupfs: the processes left read
        (Forwarder, "remove"),  # the listener's network namespace torn down
        (_isolation, "_closed"),  # the last hold on PID 1, its mounts and its disk let go
    ]:
        threads.watch(owner, name)
    sandbox = await forwarding_host.create("sbx-off-the-loop", Limits(2**30, 1))
    assert isinstance(sandbox, NamespaceSandbox) and sandbox.listener is not None
    await sandbox.close()
    assert set(threads.ran) == {"create", "recycle", "remove", "_closed"}
    assert list(threads.on_the_loop()) == []


async def test_a_runs_files_result_and_memory_are_read_off_the_event_loop(
    local: tuple[Store, SandboxHost, SwarmServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, domain = local
    threads = Threads(monkeypatch)
    for name in ("write_file", "read_file", "oom_killed"):
        threads.watch(Sandbox, name)
    run = {
        "command": "cp /tmp/in /tmp/out",
        "count": 1,
        "size": {"vcpus": 1, "memoryGb": 1},
        "files": {"/tmp/in": "kept"},
        "resultPath": "/tmp/out",
    }
    (sandbox,) = store.sandboxes(await run_to_completion(domain, run))
    assert (sandbox.status, sandbox.result) == ("succeeded", "kept")
    assert set(threads.ran) == {"write_file", "read_file", "oom_killed"}
    assert list(threads.on_the_loop()) == []


async def test_a_burst_of_starts_leaves_the_event_loop_to_others_between_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state", "process"))
    domain = assemble(store, host, Settings(64))
    happened: list[str] = []
    booting = Runs.set_booting

    def start(runs: Runs, run_id: str, idx: int, node: str | None = None) -> None:
        happened.append("start")
        booting(runs, run_id, idx, node)

    async def others() -> None:
        while True:
            happened.append("other")
            await anyio.lowlevel.checkpoint()

    monkeypatch.setattr(Runs, "set_booting", start)
    raw = {"command": "sleep 5", "count": 40, "size": {"vcpus": 1, "memoryGb": 1}}
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                await tg.start(domain.serve)
                tg.start_soon(others)
                domain.start(Owner("acct_test"), start_request(raw, None))
                while happened.count("start") < 40:  # noqa: ASYNC110 (no event to await)
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
        bursts = [len(run) for run in "".join(e[0] for e in happened).split("o") if run]
        assert sum(bursts) == 40 and max(bursts) == 16  # each pass starts 16 at most
    finally:
        gc.unfreeze()
        await host.aclose()
        host.cgroups.remove_base()
        store.close()


async def test_a_burst_of_starts_boots_a_few_sandboxes_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state", "namespaces"))
    domain = assemble(store, host, Settings(64))
    booting, most = 0, 0
    create = SandboxHost._create

    async def counted(
        self: SandboxHost, sandbox_id: str, limits: Limits, snapshot: str | None
    ) -> Sandbox:
        nonlocal booting, most
        booting += 1
        most = max(most, booting)
        try:
            return await create(self, sandbox_id, limits, snapshot)
        finally:
            booting -= 1

    monkeypatch.setattr(SandboxHost, "_create", counted)
    # one run of 24 at once: each sandbox is booted, none made anew from another
    raw = {"command": "true", "count": 24, "size": {"vcpus": 1, "memoryGb": 1}}
    try:
        sandboxes = store.sandboxes(await run_to_completion(domain, raw))
        assert [s.status for s in sandboxes] == ["succeeded"] * 24
        assert most == min(24, 2 * (os.cpu_count() or 1))
    finally:
        await host.aclose()
        host.cgroups.remove_base()
        store.close()
