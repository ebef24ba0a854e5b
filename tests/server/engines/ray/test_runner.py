"""The Ray engine in this process, on asyncio and trio: the shared scheduler over the Ray
runner, driving the test cluster's nodes (runs, a cancel midway, a long-lived sandbox)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server._serve import ServerOptions, assemble
from inspect_swarm.server.domain._server import SwarmServer
from inspect_swarm.server.engines.ray._engine import RayRunner
from inspect_swarm.server.model._types import Settings, Size
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost

from ....ray_cluster import RayCluster
from ....servers import needs_namespaces
from ..test_scheduler import OWNER, completed, start

pytestmark = [pytest.mark.ray, pytest.mark.anyio, needs_namespaces]


@asynccontextmanager
async def ray_domain_on(
    tmp_path: Path, cluster: RayCluster, settings: Settings
) -> AsyncIterator[tuple[Store, SwarmServer]]:
    """A store and the domain over the Ray engine, on `cluster`, in this process."""
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state"))
    options = ServerOptions(engine="ray", ray_address=cluster.address)
    domain = assemble(store, host, settings, options=options)
    try:
        yield store, domain
    finally:
        gc.unfreeze()
        await domain.aclose()  # leaves the cluster
        store.close()


@pytest.fixture
async def ray_domain(
    tmp_path: Path, ray_cluster: RayCluster
) -> AsyncIterator[tuple[Store, SwarmServer]]:
    async with ray_domain_on(tmp_path, ray_cluster, Settings(16)) as made:
        yield made


async def test_a_run_spreads_over_the_nodes_on_either_event_loop(
    ray_domain: tuple[Store, SwarmServer], ray_cluster: RayCluster
) -> None:
    store, domain = ray_domain
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            # long enough that the server asks whether each command has begun
            run_id = start(domain, "sleep 0.4; echo $INSPECT_SWARM_NODE", count=4)
            await completed(domain, run_id)
            tg.cancel_scope.cancel()
    sandboxes = store.sandboxes(run_id)
    assert [s.status for s in sandboxes] == ["succeeded"] * 4
    assert [s.stdout_tail for s in sandboxes] == [f"{s.node}\n" for s in sandboxes]
    assert {s.node for s in sandboxes} <= {ray_cluster.node_id(w) for w in ("w1", "w2")}


async def test_a_cancel_stops_the_commands_on_their_nodes_with_their_output(
    ray_domain: tuple[Store, SwarmServer],
) -> None:
    store, domain = ray_domain
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            run_id = start(domain, "echo begun; sleep 60")
            while domain.run(run_id, OWNER).counts["running"] < 2:  # noqa: ASYNC110
                await anyio.sleep(0.05)
            await anyio.sleep(0.3)  # the output reaches the node's tails
            domain.cancel(run_id, OWNER)
            await completed(domain, run_id)
            tg.cancel_scope.cancel()
    ended = [(s.status, s.stdout_tail) for s in store.sandboxes(run_id)]
    assert ended == [("cancelled", "begun\n")] * 2


async def test_a_long_lived_sandbox_is_used_on_its_node(
    tmp_path: Path, ray_cluster: RayCluster
) -> None:
    runner = RayRunner(SandboxHost(IsolationConfig(tmp_path / "state")), ray_cluster.address, "")
    try:
        with anyio.fail_after(120):
            sandbox = await runner.create_sandbox("sbx-live", Size(1, 1), None)
            try:
                process = await sandbox.exec(["sh", "-c", "echo $INSPECT_SWARM_NODE"], {})
                output = b"".join([chunk async for chunk in process.chunks("stdout")])
                assert await process.wait() == 0
            finally:
                await sandbox.close()
        assert output.decode() == f"{sandbox.node}\n"
    finally:
        await runner.aclose()


def test_no_way_out_on_the_ray_engine(tmp_path: Path) -> None:
    host = SandboxHost(IsolationConfig(tmp_path / "state", network="nat"))
    with pytest.raises(ValueError, match="--network nat: the Ray engine"):
        RayRunner(host, None, "127.0.0.1")
