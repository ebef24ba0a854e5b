"""The scheduler the engines share, on this machine's runner: a run of a size the machine
cannot hold says why at once, holds up no run behind it, and fails once it has waited the
stuck timeout, on asyncio and trio."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server._serve import assemble
from inspect_swarm.server.domain._server import SwarmServer
from inspect_swarm.server.edge._schema import start_request
from inspect_swarm.server.engines import _local
from inspect_swarm.server.engines._command import Capacity
from inspect_swarm.server.model._keys import Owner
from inspect_swarm.server.model._types import GIB, Settings
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost

pytestmark = pytest.mark.anyio

OWNER = Owner("acct_test")
STUCK_SECONDS = 4.0
"""Long enough that the run behind starts first, however loaded the machine."""
MACHINE = Capacity(1, 2 * GIB)
TOO_LARGE = "this machine (1 CPU, 2 GiB of memory) cannot hold a sandbox of 2 vCPUs and 1 GiB"


@pytest.fixture
async def small_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Store, SwarmServer]]:
    """A store and the domain over this machine's runner, the machine standing in for one of
    1 CPU and 2 GiB."""
    monkeypatch.setattr(_local, "this_machine", lambda: MACHINE)
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state", "process"))
    try:
        yield store, assemble(store, host, Settings(8, stuck_timeout=STUCK_SECONDS))
    finally:
        gc.unfreeze()
        await host.aclose()
        host.cgroups.remove_base()
        store.close()


def start(domain: SwarmServer, command: str, vcpus: int = 1, count: int = 2) -> str:
    """Start a run of `count` sandboxes of `vcpus` and 1 GiB; its id."""
    raw = {"command": command, "count": count, "size": {"vcpus": vcpus, "memoryGb": 1}}
    view, _ = domain.start(OWNER, start_request(raw, None))
    return view.run.id


async def completed(domain: SwarmServer, run_id: str) -> None:
    """Return once the run has completed."""
    while domain.run(run_id, OWNER).run.status != "completed":  # noqa: ASYNC110 (no event)
        await anyio.sleep(0.02)


async def a_run_too_large_holds_up_nothing(
    store: Store, domain: SwarmServer, reason: str, stuck_seconds: float
) -> None:
    """Serve `domain`: a run of 2 vCPUs, which nothing can hold, waits saying `reason`; a run
    of 1 vCPU behind it starts and succeeds; the first fails once stuck for `stuck_seconds`."""
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            large = start(domain, "echo never", vcpus=2)
            while domain.run(large, OWNER).run.waiting_reason is None:  # noqa: ASYNC110
                await anyio.sleep(0.02)
            assert domain.run(large, OWNER).run.waiting_reason == reason
            fits = start(domain, "echo ran")
            await completed(domain, fits)
            await completed(domain, large)
            tg.cancel_scope.cancel()
    assert [(s.status, s.stdout_tail) for s in store.sandboxes(fits)] == [
        ("succeeded", "ran\n")
    ] * 2
    # the run behind started while the large one still waited
    began = max(s.started_at or 0 for s in store.sandboxes(fits))
    assert all(began < (s.ended_at or 0) for s in store.sandboxes(large))
    failed = [(s.status, s.error, s.started_at) for s in store.sandboxes(large)]
    assert failed == [("failed", f"could not start for {stuck_seconds:g}s: {reason}", None)] * 2


async def test_a_run_larger_than_the_machine_says_why_holds_up_nothing_then_fails(
    small_machine: tuple[Store, SwarmServer],
) -> None:
    await a_run_too_large_holds_up_nothing(*small_machine, TOO_LARGE, STUCK_SECONDS)
