"""Attacks from inside a sandbox the Ray engine placed on a worker node: the cluster's own
ports (the head's GCS and client server, each node's raylet, object manager and workers,
the node's agent among them) and other sandboxes are out of its reach, and nothing it does
takes down the agent that made it and the sandboxes beside it; only the server's address is
forwarded. And from outside: another account's key reaches no sandbox on a node through the
server, and a run no node can hold holds up no run behind it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from inspect_swarm.server.engines._command import Capacity
from inspect_swarm.server.engines.ray import _engine as _ray_engine
from inspect_swarm.server.engines.ray._node import HeldSandbox, NodeAgent
from inspect_swarm.server.model._types import GIB, Settings
from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import IsolationConfig

from ..ray_cluster import RayCluster, agent_of
from ..server.engines.ray.test_agent import agent, open_port, serve_upper
from ..server.engines.ray.test_runner import ray_domain_on
from ..server.engines.test_scheduler import a_run_too_large_holds_up_nothing
from ..servers import (
    OTHER_KEY,
    Server,
    needs_namespaces,
    point_e2b_at,
    start_ray_server,
    wait_for,
    wait_until,
)
from .test_e2b import reaches_no_snapshot, snapshot_holds_its_own_files

pytestmark = [pytest.mark.ray, needs_namespaces]

__all__ = ["agent"]  # the fixture, of a node's agent in this process

_PROBE = """
import socket, sys
reached = []
for port in map(int, sys.argv[1:]):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        reached.append(port)
    except OSError:
        pass
print("reached", *reached)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ray_cluster: RayCluster) -> Iterator[Server]:
    handle = start_ray_server(tmp_path_factory.mktemp("attack") / "state", ray_cluster)
    yield handle
    handle.kill(signal.SIGTERM)


def test_a_sandbox_on_a_worker_reaches_no_port_of_the_cluster(
    server: Server, ray_cluster: RayCluster
) -> None:
    ports = [ray_cluster.port, ray_cluster.port + 1]  # GCS, Ray client server
    for base in ray_cluster.workers.values():  # raylet, object manager, some worker ports
        ports += [base, base + 1, base + 10, base + 11, base + 12]
    server_port = int(server.url.rsplit(":", 1)[1])
    with server.client() as client:
        run = client.swarms.start(
            ["python3", "-c", _PROBE, *map(str, [*ports, server_port])], count=2, size="1x1"
        )
        sandboxes = wait_for(client, run["id"])["sandboxes"]
    for sandbox in sandboxes:  # type: ignore[union-attr]
        assert sandbox["node"] is not None
        # the server's port alone: it is forwarded to the server, as on one machine
        assert sandbox["stdoutTail"] == f"reached {server_port}\n", sandbox


def _agents_of(count: int, marker: str) -> dict[int, int]:
    """The agents of the first `count` processes seen running `marker`, gathered over time: on
    a loaded machine the sandboxes of a run need not all be running at one moment."""
    seen: dict[int, int] = {}

    def all_seen() -> bool:
        seen.update(agent_of(marker))
        return len(seen) >= count

    wait_until(all_seen, timeout=60)
    return seen


def test_a_sandbox_cannot_take_down_its_nodes_agent_or_the_sandboxes_beside_it(
    server: Server,
) -> None:
    # one agent on each node makes every sandbox there: the first half kill all they can see
    # as root, fork a thousand processes and flood their output; the second half run beside
    attack = (
        "kill -9 -1; for i in $(seq 1000); do sleep 5.5 & done 2>/dev/null; "
        "yes overflowing | head -c 50000000; echo attacked"
    )
    script = (
        f'if [ "$MARITIME_SWARM_INDEX" -lt 4 ]; then {attack}; else sleep 4.5; echo survived; fi'
    )
    with server.client() as client:
        run = client.swarms.start(script, count=8, size="1x1", concurrency=8)
        agents = set(_agents_of(4, "sleep 4.5").values())
        sandboxes = wait_for(client, run["id"], timeout=90)["sandboxes"]
    assert isinstance(sandboxes, list)
    attackers, others = sandboxes[:4], sandboxes[4:]
    assert all(s["stdoutTail"].endswith("attacked\n") for s in attackers)  # each ran through
    assert {(s["status"], s["stdoutTail"]) for s in others} == {("succeeded", "survived\n")}
    assert {s["node"] for s in attackers} & {s["node"] for s in others}  # beside each other
    # the agents that made them live on, and make the next run's sandboxes
    assert 1 not in agents and all(Path(f"/proc/{pid}").exists() for pid in agents)
    with server.client() as client:
        after = client.swarms.start("sleep 2.75", count=2, size="1x1", concurrency=2)
        assert set(_agents_of(2, "sleep 2.75").values()) <= agents
        assert wait_for(client, after["id"])["counts"]["succeeded"] == 2  # type: ignore[index]


def test_a_sandbox_cannot_reach_another_sandbox_of_the_run(server: Server) -> None:
    script = (
        'if [ "$MARITIME_SWARM_INDEX" = 0 ]; then '
        'python3 -c \'import socket,time; s=socket.socket(); s.bind(("127.0.0.1", 7777)); '
        "s.listen(); time.sleep(4)'; "
        'else sleep 1; python3 -c \'import socket; socket.create_connection(("127.0.0.1", 7777), '
        "timeout=2)' 2>/dev/null && echo reached || echo refused; fi"
    )
    with server.client() as client:
        run = client.swarms.start(script, count=2, size="1x1", concurrency=2)
        sandboxes = wait_for(client, run["id"])["sandboxes"]
    assert sandboxes[1]["stdoutTail"] == "refused\n"  # type: ignore[index]


def _listening(ports: list[int]) -> list[int]:
    """The ports something listens on, as this test process (in the cluster's namespace)
    sees them."""
    found = []
    for port in ports:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            found.append(port)
    return found


@pytest.fixture
def sbx(server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A sandbox made through the unmodified e2b SDK, which Ray places on a worker."""
    e2b = pytest.importorskip("e2b")
    point_e2b_at(server, monkeypatch)
    made = e2b.Sandbox.create(timeout=60)
    yield made
    made.kill()


def test_a_long_lived_sandbox_reaches_neither_its_agent_nor_the_cluster(
    server: Server, ray_cluster: RayCluster, sbx: Any
) -> None:
    ports = [ray_cluster.port, ray_cluster.port + 1]
    for base in ray_cluster.workers.values():  # raylet, object manager, every worker port
        ports += [base, base + 1, *range(base + 10, base + 100)]
    server_port = int(server.url.rsplit(":", 1)[1])
    # the node's agent is a worker of its node, listening on one of these ports
    assert len(_listening(ports)) > len(ray_cluster.workers) * 2 + 2
    sbx.files.write("/tmp/probe.py", _PROBE)
    probe = sbx.commands.run(f"python3 /tmp/probe.py {' '.join(map(str, [*ports, server_port]))}")
    assert probe.stdout == f"reached {server_port}\n"


def test_another_accounts_key_reaches_no_sandbox_on_a_node(server: Server, sbx: Any) -> None:
    with server.http(OTHER_KEY) as other:
        assert other.get(f"/v1/sandboxes/{sbx.sandbox_id}").status_code == 404
        assert other.delete(f"/v1/sandboxes/{sbx.sandbox_id}").status_code == 404
        # envd, by the sandbox's id, without its access token: refused before the node
        made = other.post(
            "/filesystem.Filesystem/MakeDir",
            headers={"E2b-Sandbox-Id": sbx.sandbox_id, "Content-Type": "application/json"},
            content=json.dumps({"path": "/tmp/pwned"}),
        )
        assert made.status_code == 401, made.text
        read = other.get(
            "/files",
            params={"path": "/etc/hostname"},
            headers={"E2b-Sandbox-Id": sbx.sandbox_id},
        )
        assert read.status_code == 401, read.text
    assert not sbx.files.exists("/tmp/pwned")
    assert sbx.is_running()


def test_a_nodes_directory_made_by_another_user_or_a_link_is_refused(tmp_path: Path) -> None:
    from inspect_swarm.server.engines.ray._node import process_host
    from inspect_swarm.server.sandboxes._isolation import SandboxError

    planted = tmp_path / "planted"
    planted.mkdir()
    os.chown(planted, 1234, 1234)  # another user made it first, to steer root's files
    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path)
    for path in (planted, linked):
        config = IsolationConfig(path, "process")
        with pytest.raises(SandboxError, match="is not a directory of this node's user"):
            process_host(config, "node-1")
    own = tmp_path / "own"
    process_host(IsolationConfig(own, "process"), "node-1").cgroups.remove_base()
    assert stat.S_IMODE(own.stat().st_mode) == 0o700


@pytest.mark.anyio
async def test_a_run_no_node_can_hold_holds_up_no_run_behind_it(
    tmp_path: Path, ray_cluster: RayCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run of 2 vCPUs on nodes of 1 CPU waited in Ray's queue for good, its memory booked,
    # and every run behind it waited too: the cluster's nodes stand in as 1 CPU each here
    monkeypatch.setattr(_ray_engine, "node_capacities", lambda: [Capacity(1, 8 * GIB)] * 2)
    stuck = 4.0
    async with ray_domain_on(tmp_path, ray_cluster, Settings(16, stuck_timeout=stuck)) as made:
        reason = (
            "the largest node of the Ray cluster (1 CPU, 8 GiB of memory) cannot hold a "
            "sandbox of 2 vCPUs and 1 GiB"
        )
        await a_run_too_large_holds_up_nothing(*made, reason, stuck)


async def _relayed(agent: NodeAgent, address: tuple[str, int], sent: bytes) -> bytes:
    """What comes back to a connection to a port the agent opened, that sends `sent` first,
    while the agent relays the port."""
    with anyio.fail_after(30):
        async with await anyio.connect_tcp(*address) as stream:
            await stream.send(sent)
            received = b""
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    received += await stream.receive()
            return received


@pytest.mark.anyio
async def test_a_relayed_port_takes_one_connection_with_its_token_once(agent: NodeAgent) -> None:
    await serve_upper(agent, "sbx-a")
    for first in (b"x" * 32, None):  # another party comes first; the server does
        address, token = await open_port(agent, "sbx-a", 8000)
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.held, "sbx-a", HeldSandbox.relay_port, token)
            answer = await _relayed(agent, address, (first or token) + b"hello")
        assert answer == (b"" if first else b"HELLO")  # nothing relayed without the token
        # one connection only: the token is good no more, whoever came first
        with pytest.raises(OSError):
            await anyio.connect_tcp(*address)
        ok, error = await agent.held("sbx-a", HeldSandbox.relay_port, token)
        assert not ok and isinstance(error, LookupError)


@pytest.mark.anyio
async def test_a_relay_reaches_its_own_sandboxs_loopback_only(agent: NodeAgent) -> None:
    await serve_upper(agent, "sbx-a")
    await open_port(agent, "sbx-a", 8000)  # listening, on its own loopback
    assert await agent.create("sbx-b", Limits(2**30, 1)) == (True, None)
    with socket.create_server(("127.0.0.1", 0)) as node_server:  # a port of the node's own
        for sandbox_id, port in (("sbx-b", 8000), ("sbx-a", node_server.getsockname()[1])):
            ok, error = await agent.held(sandbox_id, HeldSandbox.open_port, port)
            assert not ok and isinstance(error, ConnectionRefusedError), error


def test_another_account_reaches_no_snapshot_or_fork_on_a_node(server: Server, sbx: Any) -> None:
    e2b = pytest.importorskip("e2b")
    sbx.files.write("secret.txt", "the victim's")
    snapshot = sbx.create_snapshot(name="private")
    try:
        reaches_no_snapshot(server, OTHER_KEY, sbx.sandbox_id, (snapshot.snapshot_id, "private"))
        owned = [s.snapshot_id for s in e2b.Sandbox.list_snapshots().next_items()]
        assert owned == [snapshot.snapshot_id]
    finally:
        e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)


def test_a_snapshot_on_a_node_holds_its_own_sandboxs_files_alone(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    e2b = pytest.importorskip("e2b")
    point_e2b_at(server, monkeypatch)

    def node(box: Any) -> str:
        return str(box.commands.run("echo $INSPECT_SWARM_NODE").stdout.strip())

    made = [e2b.Sandbox.create(timeout=120)]
    victim, attacker = made[0], None
    try:
        while attacker is None and len(made) < 6:  # one beside the victim, on its node
            made.append(e2b.Sandbox.create(timeout=120))
            attacker = made[-1] if node(made[-1]) == node(victim) else None
        assert attacker is not None
        state = _ray_engine.NODE_STATE_DIR  # where the agents keep sandboxes and snapshots
        snapshot_holds_its_own_files(victim, attacker, state, state / "snapshots")
    finally:
        for box in made:
            box.kill()
