"""Attacks from a sandbox with a way out (`--network nat`): it reaches the outside, and nothing
of the host's, the server's or another sandbox's; its root cannot change its rules, spoof
another address or open connections without bound. The server runs in a network namespace
of the test's, joined to a stand-in internet."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator

import pytest
from e2b import Sandbox, SandboxException

from inspect_swarm.server.sandboxes._network import CONNECTIONS
from inspect_swarm.server.sandboxes._relay import HTTP_PORT as WEB_PORT
from inspect_swarm.server.sandboxes._relay import TLS_PORT

from ..outside import (
    ELSEWHERE,
    FLOOD_PORT,
    HTTP_PORT,
    METADATA,
    NAMED,
    OUTSIDE,
    REACH,
    SERVER_SIDE,
    UDP_PORT,
    Internet,
    internet,
    needs_nftables,
)
from ..servers import Server, needs_namespaces, point_e2b_at

pytestmark = [needs_namespaces, needs_nftables]

ANSWERED = "HTTP/1.0 200"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    with internet(tmp_path_factory.mktemp("internet")) as made:
        yield made


@pytest.fixture(scope="module")
def nat(tmp_path_factory: pytest.TempPathFactory, world: Internet) -> Iterator[Server]:
    handle = world.start_server(tmp_path_factory.mktemp("net") / "state", "--network", "nat")
    yield handle
    handle.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def host_service(world: Internet) -> Iterator[int]:
    """A port of the server's namespace listening on every address (the host's services)."""
    with world.inside():
        listener = socket.create_server(("0.0.0.0", 0))
    with listener:
        yield listener.getsockname()[1]


@pytest.fixture
def sandbox(nat: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    point_e2b_at(nat, monkeypatch)
    with Sandbox.create(network={"deny_out": [ELSEWHERE]}) as box:
        box.files.write("/tmp/reach.py", REACH)
        yield box


def reach(sandbox: Sandbox, address: str, port: int = HTTP_PORT) -> str:
    return sandbox.commands.run(f"python3 /tmp/reach.py {address} {port}").stdout.strip()


def address_of(sandbox: Sandbox) -> str:
    """The sandbox's own address (its `eth0`'s)."""
    shown = sandbox.commands.run("ip -j -4 addr show eth0").stdout
    return str(json.loads(shown)[0]["addr_info"][0]["local"])


def gateway_of(sandbox: Sandbox) -> str:
    """The server's end of the sandbox's way out (its default route's gateway)."""
    return str(json.loads(sandbox.commands.run("ip -j route").stdout)[0]["gateway"])


def ruleset(world: Internet) -> str:
    return world.run("nft", "list", "ruleset")


def test_the_outside_is_reached_and_nothing_else(
    sandbox: Sandbox, host_service: int, world: Internet
) -> None:
    assert reach(sandbox, OUTSIDE).startswith(ANSWERED)
    # what the sandbox must not reach is there, as the server's namespace sees it
    with world.inside():
        for address, port in ((METADATA, HTTP_PORT), (SERVER_SIDE, host_service)):
            socket.create_connection((address, port), timeout=10).close()
    for address, port in (
        (METADATA, HTTP_PORT),  # the server's namespace reaches it: no sandbox does
        (SERVER_SIDE, host_service),  # the host's other address
        (gateway_of(sandbox), host_service),  # the host's end of the sandbox's veth
        ("127.0.0.1", host_service),  # the sandbox's own loopback, not the host's
        (ELSEWHERE, HTTP_PORT),  # its deny list
    ):
        assert reach(sandbox, address, port).startswith("unreachable"), (address, port)


def test_the_server_ports_but_the_api_are_out_of_reach(sandbox: Sandbox) -> None:
    port = int(sandbox.commands.run("echo $MARITIME_API_URL").stdout.rsplit(":", 1)[1])
    gateway = gateway_of(sandbox)
    for other in (port, port + 1):  # the API's port, and the console's after it
        assert reach(sandbox, gateway, other).startswith("unreachable")
        assert reach(sandbox, SERVER_SIDE, other).startswith("unreachable")
    # the API through the forwarder, on the sandbox's loopback
    assert "HTTP/1." in reach(sandbox, "127.0.0.1", port)


def test_another_sandbox_is_out_of_reach(sandbox: Sandbox) -> None:
    with Sandbox.create() as other:
        other.commands.run(f"python3 -m http.server {HTTP_PORT} > /tmp/http.log 2>&1 &")
        other.files.write("/tmp/reach.py", REACH)
        for _ in range(600):  # until it listens
            if reach(other, "127.0.0.1").startswith(ANSWERED):
                break
            time.sleep(0.05)
        assert reach(other, "127.0.0.1").startswith(ANSWERED), other.files.read("/tmp/http.log")
        assert reach(sandbox, address_of(other)).startswith("unreachable")


def test_its_root_cannot_change_its_rules(sandbox: Sandbox, world: Internet) -> None:
    before = ruleset(world)
    tries = (
        "nft flush ruleset",
        "ip route replace default dev eth0",
        f"ip addr add {ELSEWHERE}/32 dev eth0",
        "ip link set eth0 down",
    )
    for command in tries:
        done = sandbox.commands.run(f"{command}; echo exit=$?", user="root")
        assert "exit=0" not in done.stdout, command
    assert ruleset(world) == before
    assert reach(sandbox, ELSEWHERE).startswith("unreachable")
    assert reach(sandbox, OUTSIDE).startswith(ANSWERED)


SPOOF = """\
import socket, struct, sys
source, target, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
payload = b"spoofed"
udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton(source), socket.inet_aton(target))
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
raw.sendto(header + udp, (target, 0))
honest = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
honest.sendto(b"honest", (target, port))
print("sent")
"""


def test_it_cannot_spoof_another_address(sandbox: Sandbox, world: Internet) -> None:
    sandbox.files.write("/tmp/spoof.py", SPOOF)
    with Sandbox.create() as other:
        for source in (address_of(other), "198.51.100.77"):
            ran = sandbox.commands.run(
                f"python3 /tmp/spoof.py {source} {OUTSIDE} {UDP_PORT}", user="root"
            )
            assert ran.stdout.strip() == "sent"
    for _ in range(600):  # the honest datagrams, sent after the spoofed ones, have come
        if sum("honest" in line for line in world.datagrams()) >= 2:
            break
        time.sleep(0.05)
    received = world.datagrams()
    assert [line for line in received if "honest" in line]
    assert not [line for line in received if "spoofed" in line]


FLOOD = """\
import selectors, socket, sys, time
target, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pending = []
for _ in range(count):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((target, port))
    pending.append(s)
selector = selectors.DefaultSelector()
for s in pending:
    selector.register(s, selectors.EVENT_WRITE)
connected, deadline = 0, time.monotonic() + 10  # a safety net: local connects take ms
while selector.get_map() and time.monotonic() < deadline:
    for key, _ in selector.select(timeout=1):
        selector.unregister(key.fileobj)
        connected += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
print(connected)
"""


def test_a_flood_of_connections_is_bounded(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/flood.py", FLOOD)
    attempts = CONNECTIONS + 200
    ran = sandbox.commands.run(
        f"ulimit -n 4096; python3 /tmp/flood.py {OUTSIDE} {FLOOD_PORT} {attempts}",
        user="root",
        timeout=120,
    )
    connected = int(ran.stdout)
    assert CONNECTIONS // 2 < connected <= CONNECTIONS


def test_its_key_makes_no_sandbox_with_a_wider_way_out(sandbox: Sandbox) -> None:
    key = sandbox.commands.run("echo $E2B_API_KEY").stdout.strip()
    with pytest.raises(SandboxException, match="its own network and no other"):
        Sandbox.create(api_key=key, allow_internet_access=True)
    with Sandbox.create(api_key=key) as child:  # its maker's deny list comes along
        child.files.write("/tmp/reach.py", REACH)
        assert reach(child, ELSEWHERE).startswith("unreachable")
        assert reach(child, OUTSIDE).startswith(ANSWERED)


@pytest.fixture
def by_name(nat: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    """A sandbox whose allow list names one host, the rest denied."""
    point_e2b_at(nat, monkeypatch)
    only = {"allow_out": ["outside.test"], "deny_out": ["0.0.0.0/0"]}
    with Sandbox.create(network=only) as box:  # type: ignore[arg-type]
        box.files.write("/tmp/named.py", NAMED)
        box.files.write("/tmp/reach.py", REACH)
        yield box


def named(sandbox: Sandbox, address: str, port: int, mode: str, name: str) -> str:
    ran = sandbox.commands.run(f"python3 /tmp/named.py {address} {port} {mode} {name}")
    return ran.stdout.strip()


@pytest.fixture(scope="module")
def host_web(world: Internet) -> Iterator[socket.socket]:
    """The server's namespace's own web port, on every address."""
    with world.inside():
        listener = socket.create_server(("0.0.0.0", WEB_PORT))
    listener.setblocking(False)
    with listener:
        yield listener


def test_an_allowed_name_reaches_no_forbidden_address(
    by_name: Sandbox, host_web: socket.socket
) -> None:
    assert named(by_name, OUTSIDE, WEB_PORT, "http", "outside.test") == "host=outside.test"
    # the relay connects to where the connection went, never where its name points, and
    # whatever the name, not to what no sandbox reaches
    for address in (METADATA, SERVER_SIDE, gateway_of(by_name), "127.0.0.1"):
        assert named(by_name, address, WEB_PORT, "http", "outside.test") in (
            "closed",
            "unreachable ConnectionRefusedError",
        ), address
    with pytest.raises(BlockingIOError):  # no connection came to the host's own port
        host_web.accept()
    # an address where a name goes names no host
    assert named(by_name, OUTSIDE, WEB_PORT, "http", ELSEWHERE) == "closed"


def test_the_other_protocol_names_no_host(by_name: Sandbox) -> None:
    # a ClientHello naming an allowed host on the HTTP port: the far side's HTTP server
    # would answer it (a 400) if it were let through
    assert named(by_name, OUTSIDE, WEB_PORT, "hello", "outside.test") == "closed"
    # plain HTTP naming an allowed host on the TLS port
    assert named(by_name, OUTSIDE, TLS_PORT, "http", "outside.test") == "closed"


def test_the_relay_is_reached_only_by_redirection(by_name: Sandbox, world: Internet) -> None:
    relay = int(ruleset(world).split("redirect to :", 1)[1].split()[0])
    for address in (gateway_of(by_name), SERVER_SIDE):
        assert reach(by_name, address, relay).startswith("unreachable"), address
    with world.inside(), pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", relay), timeout=10)


SLOW = """\
import socket, sys
target, count = sys.argv[1], int(sys.argv[2])
held = []
for _ in range(count):  # each sends a request's start, never its end
    s = socket.create_connection((target, 80), timeout=120)
    s.sendall(b"GET / HTTP/1.1\\r\\nHost: outside.te")
    held.append(s)
extra = socket.create_connection((target, 80), timeout=120)
try:
    extra.sendall(b"GET / HTTP/1.0\\r\\nHost: outside.test\\r\\n\\r\\n")
    print("extra", (extra.recv(100) or b"closed").decode(errors="replace"))
except OSError:
    print("extra closed")
closed = 0
for s in held:  # the relay gives up on them
    try:
        closed += s.recv(1) == b""
    except OSError:
        closed += 1
print("held", closed)
"""


def test_slow_requests_are_bounded(by_name: Sandbox) -> None:
    by_name.files.write("/tmp/slow.py", SLOW)
    ran = by_name.commands.run(
        f"ulimit -n 4096; python3 /tmp/slow.py {OUTSIDE} {CONNECTIONS}", timeout=300
    )
    assert ran.stdout.split("\n")[:2] == ["extra closed", f"held {CONNECTIONS}"]
    # and once they are gone, the sandbox is served again
    assert named(by_name, OUTSIDE, WEB_PORT, "http", "outside.test") == "host=outside.test"
