"""Snapshots and forks on the Ray engine, with the unmodified e2b SDK: a snapshot is kept on
the node its sandbox ran on, sandboxes made from it and forks boot on that node, a restart of
the server keeps them, and a node that leaves the cluster takes its snapshots with it."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from inspect_swarm.server.engines.ray._engine import NODE_STATE_DIR

from ....ray_cluster import RayCluster
from ....servers import Server, point_e2b_at, start_ray_server, wait_until

e2b = pytest.importorskip("e2b")

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray-snapshots") / "state"


@pytest.fixture(scope="module")
def server(state: Path, ray_cluster: RayCluster) -> Iterator[Server]:
    handle = start_ray_server(state, ray_cluster, "--memory-gib", "16")
    yield handle
    handle.kill(signal.SIGTERM)


def _node(server: Server, sandbox_id: str) -> str:
    with server.http() as http:
        return str(http.get(f"/v1/sandboxes/{sandbox_id}").json()["node"])


def _listed() -> list[str]:
    return [s.snapshot_id for s in e2b.Sandbox.list_snapshots().next_items()]


def test_sandboxes_from_a_snapshot_and_forks_boot_on_the_node_holding_the_files(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(server, monkeypatch)
    sbx = e2b.Sandbox.create(timeout=120)
    made: list[e2b.Sandbox] = []
    try:
        node = _node(server, sbx.sandbox_id)
        sbx.files.write("/home/user/state.txt", "snapshotted")
        snapshot = sbx.create_snapshot()
        # kept in the node's own directory of the server's snapshots
        assert len(list(NODE_STATE_DIR.glob(f"snapshots/*/{node}/*"))) == 1
        # three (of 2 vCPUs) fill the node (8 CPUs) beside their source
        made = [e2b.Sandbox.create(snapshot.snapshot_id, timeout=120) for _ in range(3)]
        assert {_node(server, box.sandbox_id) for box in made} == {node}
        assert [box.files.read("/home/user/state.txt") for box in made] == ["snapshotted"] * 3
        for box in made:
            box.kill()
        sbx.files.write("/home/user/state.txt", "forked")
        forks = sbx.fork(count=2, timeout=120)
        made = [fork for fork in forks if isinstance(fork, e2b.Sandbox)]
        assert len(made) == 2, forks
        assert {_node(server, box.sandbox_id) for box in made} == {node}
        assert [box.files.read("/home/user/state.txt") for box in made] == ["forked"] * 2
        # the forks copied nothing aside: the node keeps the one snapshot
        assert len(list(NODE_STATE_DIR.glob(f"snapshots/*/{node}/*"))) == 1
        assert e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)
        assert list(NODE_STATE_DIR.glob(f"snapshots/*/{node}/*")) == []
    finally:
        for box in [sbx, *made]:
            box.kill()


def test_a_restarted_server_keeps_its_snapshots_on_their_nodes(
    state: Path, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = start_ray_server(state.with_name("restarted"), ray_cluster)
    try:
        point_e2b_at(first, monkeypatch)
        with e2b.Sandbox.create(timeout=120) as sbx:
            sbx.files.write("kept.txt", "across the restart")
            snapshot = sbx.create_snapshot()
    finally:
        first.kill(signal.SIGTERM)
    again = start_ray_server(first.state_dir, ray_cluster)
    try:
        point_e2b_at(again, monkeypatch)
        assert _listed() == [snapshot.snapshot_id]
        with e2b.Sandbox.create(snapshot.snapshot_id, timeout=120) as made:
            assert made.files.read("kept.txt") == "across the restart"
        assert e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)
    finally:
        again.kill(signal.SIGTERM)


def test_a_node_that_leaves_takes_its_snapshots_with_it(
    server: Server, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(server, monkeypatch)
    ray_cluster.start_workers("w5")
    leaving = ray_cluster.node_id("w5")
    made: list[e2b.Sandbox] = []
    boxes: dict[str, e2b.Sandbox] = {}
    try:
        # Ray spreads them over the three workers: soon one is on the new one
        while (leaving not in boxes or len(boxes) < 2) and len(made) < 8:
            made.append(e2b.Sandbox.create(timeout=120))
            boxes.setdefault(_node(server, made[-1].sandbox_id), made[-1])
        assert leaving in boxes and len(boxes) >= 2
        snapshots = {node: box.create_snapshot().snapshot_id for node, box in boxes.items()}
        ray_cluster.stop_worker("w5")
        gone = snapshots.pop(leaving)
        # at once, before the server's next look at the cluster: the boot finds the node gone
        with pytest.raises(e2b.SandboxException, match=r"404: .*which has left the Ray cluster"):
            e2b.Sandbox.create(gone, timeout=120)
        wait_until(lambda: gone not in _listed(), timeout=90)
        assert sorted(_listed()) == sorted(snapshots.values())
        with pytest.raises(e2b.SandboxException, match=r"404: .*which has left the Ray cluster"):
            e2b.Sandbox.create(gone, timeout=120)
        # the rest stay, on their live nodes
        for snapshot_id in snapshots.values():
            with e2b.Sandbox.create(snapshot_id, timeout=120) as copy:
                assert copy.is_running()
            assert e2b.Sandbox.delete_snapshot(snapshot_id)
    finally:
        for box in made:
            box.kill()
