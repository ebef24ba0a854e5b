"""Sandboxes' way out (`--network nat`): routed through the server's namespace under its
rules, per sandbox; every test inside namespaces of its own, joined to a stand-in internet."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from ipaddress import IPv4Network
from pathlib import Path

import pytest

from inspect_swarm.server._defaults import NetworkMode
from inspect_swarm.server.engines._command import follow
from inspect_swarm.server.sandboxes import _isolation as isolation
from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import NamespaceSandbox, SandboxHost
from inspect_swarm.server.sandboxes._network import Outbound

from ...outside import (
    ELSEWHERE,
    HTTP_PORT,
    NAMED,
    OUTSIDE,
    REACH,
    TLS_PORT,
    WEB_PORT,
    Internet,
    internet,
    needs_nftables,
)
from ...servers import needs_namespaces

pytestmark = [needs_namespaces, needs_nftables, pytest.mark.anyio]

LIMITS = Limits(2**30, 1)
ANSWERED = "HTTP/1.0 200"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    with internet(tmp_path_factory.mktemp("internet")) as made, made.inside():
        yield made


def _host(state: Path, world: Internet, network: NetworkMode | None) -> SandboxHost:
    """A sandbox host with `network` (None: the default)."""
    # never the machine's own namespace: the rules would be the machine's
    assert os.readlink("/proc/thread-self/ns/net") == world.namespace
    config = isolation.IsolationConfig(state)
    host = SandboxHost(
        config if network is None else isolation.IsolationConfig(state, network=network)
    )
    host.reap_leftovers()
    return host


async def _closed(host: SandboxHost) -> None:
    await host.aclose()
    host.cgroups.remove_base()


@pytest.fixture
async def nat(tmp_path: Path, world: Internet) -> AsyncIterator[SandboxHost]:
    host = _host(tmp_path / "state", world, "nat")
    yield host
    await _closed(host)


async def _boot(host: SandboxHost, outbound: Outbound | None = isolation.OPEN) -> NamespaceSandbox:
    box = await host.create("sbx-network", LIMITS, outbound=outbound)
    assert isinstance(box, NamespaceSandbox)
    return box


async def reach(box: NamespaceSandbox, address: str, port: int = HTTP_PORT) -> str:
    """What `REACH` in the sandbox says of `address:port`."""
    return await said(box, REACH, address, str(port))


async def named(box: NamespaceSandbox, address: str, port: int, mode: str, name: str) -> str:
    """What `NAMED` in the sandbox says of a request to `address:port` naming `name`."""
    return await said(box, NAMED, address, str(port), mode, name)


async def said(box: NamespaceSandbox, program: str, *args: str) -> str:
    """What the python `program` run in the sandbox with `args` prints."""
    tails = {"stdout": bytearray(), "stderr": bytearray()}
    process = await box.exec(["python3", "-c", program, *args], {})
    await follow(process, tails)
    box.forget(process)
    return (tails["stdout"] + tails["stderr"]).decode().strip()


def ways_out() -> list[str]:
    """The server's ends of sandboxes' veth pairs in this namespace."""
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True).stdout)
    return [link["ifname"] for link in links if link["ifname"].startswith("sw")]


def ruleset() -> str:
    return subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True).stdout


def _net(*cidrs: str) -> tuple[IPv4Network, ...]:
    return tuple(IPv4Network(cidr) for cidr in cidrs)


async def test_off_by_default_no_route_out(tmp_path: Path, world: Internet) -> None:
    host = _host(tmp_path / "state", world, None)
    try:
        box = await _boot(host)
        assert (await reach(box, OUTSIDE)).startswith("unreachable")
        assert ways_out() == []
        await box.close()
    finally:
        await _closed(host)


async def test_nat_reaches_the_outside_host(nat: SandboxHost) -> None:
    box = await _boot(nat)
    assert (await reach(box, OUTSIDE)).startswith(ANSWERED)
    assert len(ways_out()) == 1
    await box.close()
    assert ways_out() == []


async def test_no_outbound_no_route(nat: SandboxHost) -> None:
    box = await _boot(nat, None)
    assert (await reach(box, OUTSIDE)).startswith("unreachable")
    assert ways_out() == []
    await box.close()


async def test_allow_list_over_deny_all(nat: SandboxHost) -> None:
    only = Outbound(allow=_net(f"{OUTSIDE}/32"), deny=_net("0.0.0.0/0"))
    box = await _boot(nat, only)
    assert (await reach(box, OUTSIDE)).startswith(ANSWERED)
    assert (await reach(box, ELSEWHERE)).startswith("unreachable")
    await box.close()


async def test_deny_list(nat: SandboxHost) -> None:
    box = await _boot(nat, Outbound(deny=_net(f"{ELSEWHERE}/32")))
    assert (await reach(box, ELSEWHERE)).startswith("unreachable")
    assert (await reach(box, OUTSIDE)).startswith(ANSWERED)
    await box.close()


async def test_a_reset_sandbox_is_routed_out_again(nat: SandboxHost) -> None:
    box = await _boot(nat, Outbound(deny=_net(f"{ELSEWHERE}/32")))
    assert (await reach(box, OUTSIDE)).startswith(ANSWERED)
    await box.reset("sbx-network-2")
    assert (await reach(box, OUTSIDE)).startswith(ANSWERED)
    assert (await reach(box, ELSEWHERE)).startswith("unreachable")
    assert len(ways_out()) == 1
    await box.close()
    assert ways_out() == []


async def test_server_stop_and_restart_remove_what_it_made(tmp_path: Path, world: Internet) -> None:
    first = _host(tmp_path / "state", world, "nat")
    box = await _boot(first)
    assert "chain s0 " in ruleset()
    # a server on the same state directory starting after a crash: the last one's are gone
    second = _host(tmp_path / "state", world, "nat")
    assert ways_out() == []
    assert "chain s0 " not in ruleset()
    await box.close()
    await _closed(second)
    assert "inspect_swarm_" not in ruleset()
    await _closed(first)


ALL = _net("0.0.0.0/0")


async def test_an_allowed_name_passes_and_another_is_closed(nat: SandboxHost) -> None:
    box = await _boot(nat, Outbound(deny=ALL, names=("outside.test",)))
    for port, mode in ((WEB_PORT, "http"), (TLS_PORT, "tls")):
        assert await named(box, OUTSIDE, port, mode, "outside.test") == "host=outside.test"
        assert await named(box, OUTSIDE, port, mode, "Outside.Test.") == "host=Outside.Test."
        assert await named(box, OUTSIDE, port, mode, "elsewhere.test") == "closed"
    # no name on other ports: the addresses decide
    assert (await reach(box, OUTSIDE)).startswith("unreachable")
    assert "named" in ruleset()
    await box.close()
    assert "named {\n\t\ttype ifname\n\t}" in ruleset()  # its entry went with it


async def test_a_wildcard_names_the_hosts_below(nat: SandboxHost) -> None:
    box = await _boot(nat, Outbound(deny=ALL, names=("*.web.test",)))
    for name, answer in (
        ("www.web.test", "host=www.web.test"),
        ("a.b.web.test", "host=a.b.web.test"),
        ("web.test", "closed"),
        ("www.notweb.test", "closed"),
    ):
        assert await named(box, OUTSIDE, TLS_PORT, "tls", name) == answer, name
    await box.close()


async def test_addresses_and_names_in_one_list(nat: SandboxHost) -> None:
    only = Outbound(allow=_net(f"{OUTSIDE}/32"), deny=ALL, names=("web.test",))
    box = await _boot(nat, only)
    assert (await reach(box, OUTSIDE)).startswith(ANSWERED)  # its address, another port
    assert (await reach(box, ELSEWHERE)).startswith("unreachable")
    assert await named(box, ELSEWHERE, WEB_PORT, "http", "web.test") == "host=web.test"
    assert await named(box, ELSEWHERE, WEB_PORT, "http", "other.test") == "closed"
    # its address lets any name through
    assert await named(box, OUTSIDE, WEB_PORT, "http", "other.test") == "host=other.test"
    await box.close()
