"""Long-lived sandboxes on the Ray engine: the unmodified e2b SDK and the `swarm_server`
provider on sandboxes Ray placed on worker nodes, their traffic relayed by the server (and
their ports' by their nodes)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from inspect_ai.agent import react
from inspect_ai.tool import bash

from inspect_swarm import member, swarm
from inspect_swarm.sandbox import swarm_server
from inspect_swarm.server.engines.ray._engine import NODE_STATE_DIR

from ....members.test_sandboxes import bash_call, run_envs, tool_results
from ....ray_cluster import RayCluster, agent_of
from ....runtime.helpers import ALL_RUN
from ....servers import (
    KEY,
    Server,
    environment_args,
    point_e2b_at,
    start_ray_server,
    wait_for,
    wait_until,
)
from .test_cluster import leftovers

e2b = pytest.importorskip("e2b")

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ray_cluster: RayCluster) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("ray-long-lived") / "state"
    # the agents' bash tool runs this test run's python in the sandboxes
    handle = start_ray_server(state, ray_cluster, "--memory-gib", "16", *environment_args())
    yield handle
    handle.kill(signal.SIGTERM)


def workers(cluster: RayCluster) -> set[str]:
    return {cluster.node_id(name) for name in ("w1", "w2")}


@contextmanager
def on_a_worker(
    server: Server, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, str]]:
    """A sandbox made with the unmodified e2b SDK, and the worker Ray placed it on (killed
    after)."""
    point_e2b_at(server, monkeypatch)
    sbx = e2b.Sandbox.create(timeout=120)
    try:
        node = sbx.commands.run("echo $INSPECT_SWARM_NODE").stdout.strip()
        assert node in workers(ray_cluster)
        yield sbx, node
    finally:
        sbx.kill()


def test_the_e2b_sdk_uses_a_sandbox_placed_on_a_worker(
    server: Server, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with on_a_worker(server, ray_cluster, monkeypatch) as (sbx, node):
        with server.http() as http:
            described = http.get(f"/v1/sandboxes/{sbx.sandbox_id}").json()
        assert (described["status"], described["node"]) == ("running", node)

        streamed: list[str] = []
        sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.1; done", on_stdout=streamed.append)
        assert "".join(streamed) == "1\n2\n3\n"
        with pytest.raises(e2b.CommandExitException) as failed:
            sbx.commands.run("echo oops >&2; exit 3")
        assert (failed.value.exit_code, failed.value.stderr) == (3, "oops\n")
        handle = sbx.commands.run("cat", background=True, stdin=True)
        sbx.commands.send_stdin(handle.pid, "fed through the server\n")
        sbx.commands.close_stdin(handle.pid)
        assert handle.wait().stdout == "fed through the server\n"

        sbx.files.write("notes/a.txt", "written on the node")
        assert sbx.files.read("notes/a.txt") == "written on the node"
        assert [e.name for e in sbx.files.list("notes")] == ["a.txt"]
        assert sbx.files.get_info("notes/a.txt").owner == "user"
        assert (
            sbx.commands.run("cat notes/a.txt; echo; whoami").stdout
            == "written on the node\nuser\n"
        )
        sbx.commands.run("sleep 171.5", background=True)
    with server.http() as http:
        ended = http.get(f"/v1/sandboxes/{sbx.sandbox_id}").json()
    assert (ended["status"], ended["endReason"], ended["node"]) == ("ended", "killed", node)
    # on a loaded machine the node may still be clearing the sandbox away when the kill ends
    wait_until(lambda: leftovers("sleep 171.5") == [])
    # nothing of the sandbox is left on its node (its agent lives on for the next)
    assert not list(NODE_STATE_DIR.glob(f"w*/sbx/{sbx.sandbox_id}"))


def test_a_swarm_spreads_its_members_sandboxes_over_the_nodes(
    server: Server, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    agents = member(react, {"tools": [bash()]}, name="agent", count=3, sandbox="{member}")
    sample = run_envs(
        swarm(agents, controller=ALL_RUN, channels=[]),
        {"*": [bash_call("echo $INSPECT_SWARM_NODE"), {"submit": "42"}]},
        tmp_path,
        ("default", "agent-1", "agent-2", "agent-3"),
        lambda *envs: swarm_server(*envs, api_url=server.url, api_key=KEY),
    )
    assert sample.error is None
    nodes = {name: result.strip() for name, result in tool_results(sample, "bash").items()}
    assert sorted(nodes) == ["agent-1", "agent-2", "agent-3"]
    assert set(nodes.values()) <= workers(ray_cluster)
    assert len(set(nodes.values())) == 2
    with server.http() as http:
        assert http.get("/v1/sandboxes").json()["sandboxes"] == []


def test_a_lost_node_ends_its_long_lived_sandboxes_and_keeps_the_rest(
    server: Server, ray_cluster: RayCluster
) -> None:
    ray_cluster.start_workers("w3")
    lost = ray_cluster.node_id("w3")
    with server.client() as client:
        by_node: dict[str, str] = {}
        # Ray spreads them over the three workers: soon one is on the third
        while (lost not in by_node.values() or len(set(by_node.values())) < 2) and len(by_node) < 6:
            box = client.sandboxes.create(size="1x1", timeout_seconds=120)
            by_node[box["sandboxId"]] = client.sandboxes.get(box["sandboxId"])["node"]
        assert lost in by_node.values() and len(set(by_node.values())) >= 2
        ray_cluster.kill_worker("w3")

        def ended_on_the_lost_node() -> bool:
            return all(
                client.sandboxes.get(s)["status"] == "ended"
                for s, n in by_node.items()
                if n == lost
            )

        wait_until(ended_on_the_lost_node, timeout=60)
        for sandbox_id, node in by_node.items():
            got = client.sandboxes.get(sandbox_id)
            if node == lost:
                assert got["endReason"] == f"node lost: {lost}"
            else:
                assert got["status"] == "running"
                client.sandboxes.kill(sandbox_id)


def test_one_agent_per_node_makes_its_runs_and_long_lived_sandboxes(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(server, monkeypatch)
    sbx = e2b.Sandbox.create(timeout=120)
    try:
        # held: a start's stream that ends (its handle collected) ends the command
        handle = sbx.commands.run("exec sleep 30.25", background=True)
        live_node = sbx.commands.run("echo $INSPECT_SWARM_NODE").stdout.strip()
        with server.client() as client:
            run = client.swarms.start("sleep 3.25; echo $INSPECT_SWARM_NODE", count=12, size="1x1")
            wait_until(lambda: len(agent_of("sleep 3.25")) == 12, timeout=60)
            agents = agent_of("sleep 3.25")
            done = wait_for(client, run["id"], timeout=60)
        nodes = {s["stdoutTail"].strip() for s in done["sandboxes"]}  # type: ignore[union-attr]
        # a server's sandboxes on a node are one process's, whatever made them
        assert len(nodes) == 2
        assert 1 not in agents.values()
        assert len(set(agents.values())) == 2
        [live_agent] = set(agent_of("sleep 30.25").values())
        assert live_agent in agents.values()
        assert live_node in nodes
        handle.kill()
    finally:
        sbx.kill()


PEER = """\
import http.server, sys

class Peer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = f"{self.client_address[1]}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Peer).serve_forever()
"""


def test_a_port_of_a_sandbox_on_a_worker_is_relayed_by_its_node(
    server: Server, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with on_a_worker(server, ray_cluster, monkeypatch) as (sbx, _):
        sbx.files.write("peer.py", PEER)
        handle = sbx.commands.run("python3 peer.py 8000", background=True)
        headers = {"host": sbx.get_host(8000)}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            deadline = time.monotonic() + 60
            while (first := client.get("/")).status_code == 502:
                assert time.monotonic() < deadline, first.text
                time.sleep(0.1)
            # the relayed connection is kept for the next request: the same peer port
            assert [client.get("/").text for _ in range(3)] == [first.text] * 3
        handle.kill()
    gone = httpx.get(server.url, headers=headers, timeout=30)
    assert gone.status_code == 502 and "not found" in gone.json()["message"]
