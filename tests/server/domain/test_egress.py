"""What way out a sandbox gets: its create's asking under the server's `--network`, and its
maker's when a sandbox made it."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network

import pytest

from inspect_swarm.server.domain._egress import EVERYWHERE, inherited, way_out
from inspect_swarm.server.model._types import Egress, InvalidRequest
from inspect_swarm.server.sandboxes._network import Outbound

SOME = (IPv4Network("198.51.100.0/24"),)


@dataclass(frozen=True)
class Maker:
    egress: Egress


def test_none_gives_nothing_and_refuses_a_way_out() -> None:
    assert way_out("none", Egress()) is None
    assert way_out("none", Egress(internet=False, deny_out=SOME)) is None
    for asked, field in ((Egress(internet=True), "allow_internet_access"),
                         (Egress(allow_out=SOME), "network.allowOut")):  # fmt: skip
        with pytest.raises(InvalidRequest, match="--network nat") as refused:
            way_out("none", asked)
        assert refused.value.field == field


def test_nat_gives_what_is_asked() -> None:
    assert way_out("nat", Egress()) == Outbound()
    assert way_out("nat", Egress(internet=False)) is None
    assert way_out("nat", Egress(internet=False, allow_out=SOME)) == Outbound(SOME, (EVERYWHERE,))
    assert way_out("nat", Egress(allow_out=SOME, deny_out=SOME)) == Outbound(SOME, SOME)


def test_host_refuses_to_be_narrowed() -> None:
    assert way_out("host", Egress(internet=True)) is None
    for asked in (Egress(internet=False), Egress(allow_out=SOME), Egress(deny_out=SOME)):
        with pytest.raises(InvalidRequest, match="--network host"):
            way_out("host", asked)


def test_a_sandbox_makes_none_wider_than_itself() -> None:
    narrow = Maker(Egress(deny_out=SOME))
    assert inherited(Egress(), narrow) == narrow.egress
    assert inherited(narrow.egress, narrow) == narrow.egress
    with pytest.raises(InvalidRequest, match="its own network and no other"):
        inherited(Egress(internet=True), narrow)
    assert inherited(Egress(internet=False), Maker(Egress())) == Egress(internet=False)
    assert inherited(Egress(internet=True), None) == Egress(internet=True)


def test_host_names_only_where_the_rest_is_denied() -> None:
    names = ("pypi.org", "*.web.test")
    assert way_out("nat", Egress(allow_names=names, deny_out=(EVERYWHERE,))) == Outbound(
        (), (EVERYWHERE,), names
    )
    assert way_out("nat", Egress(internet=False, allow_names=names)) == Outbound(
        (), (EVERYWHERE,), names
    )
    with pytest.raises(InvalidRequest, match=r"pypi\.org, \*\.web\.test.*0\.0\.0\.0/0"):
        way_out("nat", Egress(allow_names=names, deny_out=SOME))
    for network in ("none", "host"):
        with pytest.raises(InvalidRequest, match=r"network\.allowOut"):
            way_out(network, Egress(allow_names=names))
