"""Sandboxes' network with the unmodified e2b SDK: none by default, a way out with
`--network nat`, `allow_internet_access` and the allow and deny lists; every server here runs
in a network namespace of the test's, joined to a stand-in internet."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import AsyncSandbox, Sandbox, SandboxException

from .... import outside
from ....outside import ELSEWHERE, HTTP_PORT, OUTSIDE, REACH, Internet, internet, needs_nftables
from ....servers import Server, needs_namespaces, point_e2b_at

pytestmark = [needs_namespaces, needs_nftables]

ANSWERED = "HTTP/1.0 200"
ALL_TRAFFIC = "0.0.0.0/0"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    with internet(tmp_path_factory.mktemp("internet")) as made:
        yield made


def _start(
    tmp_path_factory: pytest.TempPathFactory, world: Internet, *extra: str
) -> Iterator[Server]:
    handle = world.start_server(tmp_path_factory.mktemp("net") / "state", *extra)
    yield handle
    handle.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def nat(tmp_path_factory: pytest.TempPathFactory, world: Internet) -> Iterator[Server]:
    yield from _start(tmp_path_factory, world, "--network", "nat")


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory, world: Internet) -> Iterator[Server]:
    yield from _start(tmp_path_factory, world)


def reach(sandbox: Sandbox, address: str) -> str:
    """What `REACH` says of `address` from inside `sandbox`."""
    sandbox.files.write("/tmp/reach.py", REACH)
    return sandbox.commands.run(f"python3 /tmp/reach.py {address} {HTTP_PORT}").stdout.strip()


def ways_out(world: Internet) -> list[str]:
    """The server's ends of sandboxes' veth pairs."""
    links = json.loads(world.run("ip", "-j", "link"))
    return [link["ifname"] for link in links if link["ifname"].startswith("sw")]


def tables(world: Internet) -> list[str]:
    return world.run("nft", "list", "tables").splitlines()


def test_no_way_out_by_default(off: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    point_e2b_at(off, monkeypatch)
    with Sandbox.create() as sandbox:
        assert reach(sandbox, OUTSIDE).startswith("unreachable")
    with pytest.raises(SandboxException, match="--network nat"):
        Sandbox.create(allow_internet_access=True)
    with pytest.raises(SandboxException, match=r"network\.allowOut"):
        Sandbox.create(network={"allow_out": [OUTSIDE]})


def test_nat_reaches_the_outside_and_cleans_up(
    nat: Server, world: Internet, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(nat, monkeypatch)
    sandbox = Sandbox.create()
    assert reach(sandbox, OUTSIDE).startswith(ANSWERED)
    assert len(ways_out(world)) == 1
    sandbox.kill()
    assert ways_out(world) == []


def test_allow_internet_access_false(nat: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    point_e2b_at(nat, monkeypatch)
    with Sandbox.create(allow_internet_access=False) as sandbox:
        assert reach(sandbox, OUTSIDE).startswith("unreachable")


def test_allow_and_deny_lists(nat: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    point_e2b_at(nat, monkeypatch)
    only = {"allow_out": [OUTSIDE], "deny_out": [ALL_TRAFFIC]}
    with Sandbox.create(network=only) as sandbox:  # type: ignore[arg-type]
        assert reach(sandbox, OUTSIDE).startswith(ANSWERED)
        assert reach(sandbox, ELSEWHERE).startswith("unreachable")
    with Sandbox.create(network={"deny_out": [f"{ELSEWHERE}/32"]}) as sandbox:
        assert reach(sandbox, ELSEWHERE).startswith("unreachable")
        assert reach(sandbox, OUTSIDE).startswith(ANSWERED)


def named(sandbox: Sandbox, address: str, port: int, mode: str, name: str) -> str:
    """What `NAMED` says of a request naming `name` to `address:port` from inside `sandbox`."""
    sandbox.files.write("/tmp/named.py", outside.NAMED)
    ran = sandbox.commands.run(f"python3 /tmp/named.py {address} {port} {mode} {name}")
    return ran.stdout.strip()


def test_host_names_in_the_allow_list(nat: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    point_e2b_at(nat, monkeypatch)
    only = {"allow_out": ["outside.test", "*.web.test"], "deny_out": [ALL_TRAFFIC]}
    with Sandbox.create(network=only) as sandbox:  # type: ignore[arg-type]
        assert (
            named(sandbox, OUTSIDE, outside.TLS_PORT, "tls", "outside.test") == "host=outside.test"
        )
        assert named(sandbox, OUTSIDE, outside.WEB_PORT, "http", "a.web.test") == "host=a.web.test"
        assert named(sandbox, OUTSIDE, outside.WEB_PORT, "http", "pypi.org") == "closed"
        assert reach(sandbox, OUTSIDE).startswith("unreachable")  # other ports: addresses
    with Sandbox.create(
        allow_internet_access=False, network={"allow_out": ["outside.test"]}
    ) as sandbox:
        assert (
            named(sandbox, ELSEWHERE, outside.WEB_PORT, "http", "outside.test")
            == "host=outside.test"
        )


def test_host_names_refused_where_they_cannot_filter(
    nat: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(nat, monkeypatch)
    with pytest.raises(SandboxException, match=r"pypi\.org.*allow list only"):
        Sandbox.create(network={"deny_out": ["pypi.org"]})
    with pytest.raises(SandboxException, match=r"network\.allowOut.*add 0\.0\.0\.0/0"):
        Sandbox.create(network={"allow_out": ["pypi.org"]})
    with pytest.raises(SandboxException, match=r"not an IPv4 address, CIDR range or host name"):
        Sandbox.create(network={"allow_out": ["pypi org"], "deny_out": [ALL_TRAFFIC]})


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_the_async_sdk(
    anyio_backend: str, nat: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(nat, monkeypatch)
    sandbox = await AsyncSandbox.create(network={"deny_out": [ELSEWHERE]})
    await sandbox.files.write("/tmp/reach.py", REACH)
    for address, answer in ((OUTSIDE, ANSWERED), (ELSEWHERE, "unreachable")):
        ran = await sandbox.commands.run(f"python3 /tmp/reach.py {address} {HTTP_PORT}")
        assert ran.stdout.startswith(answer)
    await sandbox.kill()


def test_server_stop_leaves_nothing(
    tmp_path: Path, world: Internet, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = (ways_out(world), tables(world))
    handle = world.start_server(tmp_path / "state", "--network", "nat")
    point_e2b_at(handle, monkeypatch)
    Sandbox.create()  # left running
    assert len(ways_out(world)) == len(before[0]) + 1
    assert len(tables(world)) == len(before[1]) + 1
    handle.kill(signal.SIGTERM)
    assert (ways_out(world), tables(world)) == before
