"""The swarm server's Ray engine on a real cluster: a head and two worker nodes (and, for a
crash, a third) on this machine, inside a network namespace of the test process's own."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inspect_swarm.server.engines.ray._engine import NODE_STATE_DIR
from inspect_swarm.server.sandboxes._isolation import namespaces_supported

from ....ray_cluster import RayCluster
from ....servers import Server, start_ray_server, wait_for, wait_until

_MEMORY = ("--memory-gib", "16")

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not namespaces_supported(), reason="the Ray tests need Linux and root"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ray_cluster: RayCluster) -> Iterator[Server]:
    handle = start_ray_server(tmp_path_factory.mktemp("ray") / "state", ray_cluster, *_MEMORY)
    yield handle
    handle.kill(signal.SIGTERM)


def leftovers(marker: str) -> list[str]:
    """What sandboxes left on this machine's nodes: processes running `marker`, sandbox
    directories, sandbox cgroups, and mounts of the nodes' state directory."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in args:
                found.append(f"process {proc.name}: {args}")
    found += [f"directory {d}" for d in NODE_STATE_DIR.glob("w*/sbx/*")]
    for base in Path("/sys/fs/cgroup").glob("**/inspect-swarm-*"):
        found += [f"cgroup {c}" for c in base.iterdir() if c.is_dir() and c.name.startswith("sbx-")]
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    found += [f"mount {m}" for m in mounts if str(NODE_STATE_DIR) in m]
    return found


def test_a_run_spreads_over_the_nodes_each_sandbox_knowing_its_own(server: Server) -> None:
    with server.client() as client:
        run = client.swarms.start("sleep 0.5; echo $INSPECT_SWARM_NODE", count=20, size="1x1")
        done = wait_for(client, run["id"], timeout=120)
    sandboxes = done["sandboxes"]
    assert isinstance(sandboxes, list)
    assert [s["status"] for s in sandboxes] == ["succeeded"] * 20
    assert [s["stdoutTail"] for s in sandboxes] == [f"{s['node']}\n" for s in sandboxes]
    assert len({s["node"] for s in sandboxes}) >= 2
    assert done["isolation"]["engine"] == "ray"  # type: ignore[index]
    # a slot told to keep its sandbox for the run's next, which another slot took meanwhile,
    # ends it as the slot ends, just after the run's last sandbox is recorded
    wait_until(lambda: leftovers("sleep 0.5") == [])


def test_a_slots_later_sandboxes_know_their_node_from_their_start(server: Server) -> None:
    with server.client() as client:
        run = client.swarms.start("sleep 0.4; echo $INSPECT_SWARM_NODE", count=6, concurrency=2)

        def booted_where_known() -> bool:
            got = client.swarms.get(run["id"])["sandboxes"]
            # the first of each slot waits for Ray to place it; the slot's next boot there
            later = [s for s in got[2:] if s["status"] in ("booting", "running")]  # type: ignore[index]
            assert all(s["node"] for s in later)
            return all(s["status"] == "succeeded" for s in got)  # type: ignore[union-attr]

        wait_until(booted_where_known, timeout=60)
        done = client.swarms.get(run["id"])
    assert [s["stdoutTail"] for s in done["sandboxes"]] == [
        f"{s['node']}\n" for s in done["sandboxes"]
    ]  # type: ignore[union-attr]


def test_cancel_stops_sandboxes_on_every_node(server: Server) -> None:
    with server.client() as client:
        run = client.swarms.start("sleep 61.5", count=6, size="1x1")

        def running_on_two_nodes() -> bool:
            got = client.swarms.get(run["id"])["sandboxes"]
            nodes = {s["node"] for s in got if s["status"] == "running"}  # type: ignore[union-attr]
            return len(nodes) >= 2

        wait_until(running_on_two_nodes, timeout=60)
        client.swarms.cancel(run["id"])
        done = wait_for(client, run["id"], timeout=60)
    assert done["status"] == "completed"
    assert {s["status"] for s in done["sandboxes"]} == {"cancelled"}  # type: ignore[union-attr]
    # the sandboxes ended on their nodes before their end was recorded
    assert leftovers("sleep 61.5") == []


def test_a_lost_node_fails_its_sandboxes_and_the_rest_finish(
    server: Server, ray_cluster: RayCluster
) -> None:
    ray_cluster.start_workers("w3")
    lost = ray_cluster.node_id("w3")
    with server.client() as client:
        run = client.swarms.start("sleep 3.7; echo done", count=9, size="1x1")

        def running_on_the_third_node() -> bool:
            got = client.swarms.get(run["id"])["sandboxes"]
            return any(s["node"] == lost and s["status"] == "running" for s in got)  # type: ignore[union-attr]

        wait_until(running_on_the_third_node, timeout=60)
        ray_cluster.kill_worker("w3")
        done = wait_for(client, run["id"], timeout=120)
    assert done["status"] == "completed"
    sandboxes = done["sandboxes"]
    assert isinstance(sandboxes, list)
    on_lost = [s for s in sandboxes if s["node"] == lost]
    kept = [s for s in sandboxes if s["node"] != lost]
    assert on_lost and kept
    for sandbox in on_lost:
        assert sandbox["status"] == "failed"
        assert f"node lost: {lost}" in sandbox["error"]
    assert {(s["status"], s["stdoutTail"]) for s in kept} == {("succeeded", "done\n")}
    # its sandboxes died with it (their files are the next worker's on that machine to clear)
    wait_until(lambda: not [s for s in leftovers("sleep 3.7") if s.startswith("process")])


def test_a_restarted_server_explains_every_run_and_nodes_keep_nothing(
    tmp_path: Path, ray_cluster: RayCluster
) -> None:
    first = start_ray_server(tmp_path / "state", ray_cluster, *_MEMORY)
    with first.client() as client:
        run = client.swarms.start("sleep 62.5", count=4, size="1x1", concurrency=2)
        wait_until(lambda: client.swarms.get(run["id"])["counts"]["running"] == 2, timeout=60)  # type: ignore[index]
    first.kill(signal.SIGKILL)
    # the server's end is its Ray job's: the nodes end its sandboxes
    wait_until(lambda: not [s for s in leftovers("sleep 62.5") if s.startswith("process")])
    second = start_ray_server(tmp_path / "state", ray_cluster, *_MEMORY)
    try:
        with second.client() as client:
            client.swarms.cancel(run["id"])  # the two queued ones started again: stop them
            done = wait_for(client, run["id"], timeout=60)
            # a run after the restart clears what the killed server's workers left
            after = client.swarms.start("true", count=4, size="1x1")
            assert wait_for(client, after["id"])["counts"]["succeeded"] == 4  # type: ignore[index]
    finally:
        second.kill(signal.SIGTERM)
    statuses = [(s["status"], s["error"]) for s in done["sandboxes"]]  # type: ignore[union-attr]
    interrupted = ("failed", "server restarted while the sandbox was running")
    assert statuses.count(interrupted) == 2
    assert done["status"] == "completed"
    assert leftovers("sleep 62.5") == []


def test_a_stopped_server_ends_its_sandboxes_on_the_nodes_at_once(
    tmp_path: Path, ray_cluster: RayCluster
) -> None:
    server = start_ray_server(tmp_path / "state", ray_cluster, *_MEMORY)
    with server.client() as client:
        run = client.swarms.start("sleep 61.5", count=2, size="1x1")
        wait_until(lambda: client.swarms.get(run["id"])["counts"]["running"] == 2, timeout=60)  # type: ignore[index]
    began = time.monotonic()
    server.kill(signal.SIGTERM)
    # the nodes hear of the stop: no waiting out the grace a lost slot gets (30 s)
    assert time.monotonic() - began < 15
    assert leftovers("sleep 61.5") == []


def test_a_server_on_loopback_is_refused_beside_nodes_on_other_machines(
    tmp_path: Path, ray_cluster: RayCluster
) -> None:
    # "another machine": a worker on an address (not a loopback one) the test's namespace has
    subprocess.run(["ip", "addr", "add", "10.77.0.1/32", "dev", "lo"], check=True)
    try:
        # with no CPUs, nothing is placed on it, so the later tests never meet it once killed
        ray_cluster.start_workers("far", cpus=0, ip="10.77.0.1")
        with pytest.raises(RuntimeError, match="did not start") as refused:
            start_ray_server(tmp_path / "state", ray_cluster, *_MEMORY)
        log = Path(str(refused.value).rsplit(": ", 1)[1]).read_text()
        assert "--host: '127.0.0.1' is this machine's loopback" in log
        assert "(10.77.0.1)" in log and "or 0.0.0.0" in log
    finally:
        if "far" in ray_cluster.workers:
            ray_cluster.stop_worker("far")
        subprocess.run(["ip", "addr", "del", "10.77.0.1/32", "dev", "lo"], check=False)
    # the head knows the far node has gone: the servers of the tests after this one start
    start_ray_server(tmp_path / "after", ray_cluster, *_MEMORY).kill(signal.SIGTERM)


def test_a_node_that_cannot_make_sandboxes_fails_them_saying_why(
    tmp_path: Path, ray_cluster: RayCluster
) -> None:
    # the nodes' directory planted by another user: an agent started now refuses it
    os.chown(NODE_STATE_DIR, 1234, 1234)
    try:
        server = start_ray_server(tmp_path / "state", ray_cluster, *_MEMORY)
        with server.client() as client:
            run = client.swarms.start("echo ran", count=2, size="1x1")
            done = wait_for(client, run["id"], timeout=90)
        server.kill(signal.SIGTERM)
    finally:
        os.chown(NODE_STATE_DIR, 0, 0)
    for sandbox in done["sandboxes"]:  # type: ignore[union-attr]
        assert sandbox["status"] == "failed"
        assert "could not start" in sandbox["error"], sandbox["error"]
        assert "is not a directory of this node's user" in sandbox["error"]


def test_a_run_cancelled_while_ray_queues_it_gives_its_room_back(
    tmp_path: Path, ray_cluster: RayCluster
) -> None:
    # the server books more than the workers hold: what does not fit waits in Ray's queue
    server = start_ray_server(tmp_path / "state", ray_cluster, "--memory-gib", "64")
    try:
        with server.client() as client:
            # a sandbox of 8 GB fills a worker's memory: two fill the cluster
            full = client.swarms.start("sleep 60.5", count=2, size="1x8")
            wait_until(lambda: client.swarms.get(full["id"])["counts"]["running"] == 2, 60)  # type: ignore[index]
            queued = client.swarms.start("echo ran", count=1, size="1x8")
            time.sleep(1)  # asked Ray for room, which it holds in its queue
            assert client.swarms.get(queued["id"])["counts"]["booting"] == 1  # type: ignore[index]
            client.swarms.cancel(queued["id"])
            done = wait_for(client, queued["id"])
            assert [s["status"] for s in done["sandboxes"]] == ["cancelled"]  # type: ignore[union-attr]
            client.swarms.cancel(full["id"])
            wait_for(client, full["id"])
            # had the cancelled one kept its place in Ray's queue, it would now take a worker
            after = client.swarms.start("date +%s.%N; sleep 2", count=2, size="1x8")
            began = [float(s["stdoutTail"]) for s in wait_for(client, after["id"])["sandboxes"]]  # type: ignore[union-attr]
        assert abs(began[0] - began[1]) < 1.5  # both workers' room was free
    finally:
        server.kill(signal.SIGTERM)
