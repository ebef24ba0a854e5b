"""Attacks from inside a sandbox the Ray engine placed on a worker node: the cluster's own
ports (the head's GCS and client server, each node's raylet, object manager and workers) and
other sandboxes are out of its reach; only the server's address is forwarded."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from ..ray_cluster import RayCluster
from ..server.conftest import Server, needs_namespaces, start_ray_server, wait_for

pytestmark = [pytest.mark.ray, needs_namespaces]

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
