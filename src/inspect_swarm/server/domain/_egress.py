"""What way out a sandbox gets: what its create asks (`Egress`), under the server's network.

E2B's sandboxes reach the internet unless told not to, so a create that asks nothing gets
the server's network as it is. Host names in an allow list filter only a sandbox whose other
traffic is denied (as on E2B), so names with anything else let through are refused. One that asks for what the server's network cannot give (a way
out from a server without one, a restriction of the host's network) is refused, naming the
option that decides it. A sandbox that a sandbox makes (with the key it has inside) gets its
maker's way out: never a wider one than its maker was given.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Protocol

from .._defaults import NetworkMode
from ..model._types import Egress, InvalidRequest
from ..sandboxes._network import Outbound

EVERYWHERE = IPv4Network("0.0.0.0/0")
ASKED_NOTHING = Egress()


class Maker(Protocol):
    """A sandbox that makes others, as far as their way out goes."""

    @property
    def egress(self) -> Egress: ...


def inherited(asked: Egress, maker: Maker | None) -> Egress:
    """What a sandbox made by `maker` (None: not made by a sandbox) gets of its way out:
    what it asked, or its maker's (InvalidRequest when it asks for another)."""
    if maker is None or maker.egress == ASKED_NOTHING:
        return asked
    if asked not in (ASKED_NOTHING, maker.egress):
        raise InvalidRequest(
            "network",
            "a sandbox whose network was narrowed makes sandboxes with its own network and "
            "no other; leave out allow_internet_access and network's allow_out and deny_out",
        )
    return maker.egress


def way_out(network: NetworkMode, egress: Egress) -> Outbound | None:
    """Where a sandbox's connections may go (None: nowhere, its loopback only), or
    InvalidRequest naming what the server's `network` cannot give."""
    if network == "none":
        _refuse_a_way_out(egress)
        return None
    if network == "host":
        _refuse_restrictions(egress)
        return None
    if egress.internet is False:
        if not egress.allow_out and not egress.allow_names:
            return None
        return Outbound(egress.allow_out, (EVERYWHERE,), egress.allow_names)
    if egress.allow_names and EVERYWHERE not in egress.deny_out:
        raise InvalidRequest(
            "network.allowOut",
            f"names hosts ({', '.join(egress.allow_names)}), which filter a sandbox's traffic "
            "only when the rest is denied; add 0.0.0.0/0 to network.denyOut, or set "
            "allow_internet_access to false",
        )
    return Outbound(egress.allow_out, egress.deny_out, egress.allow_names)


def _refuse_a_way_out(egress: Egress) -> None:
    asked = (
        "allow_internet_access"
        if egress.internet
        else "network.allowOut"
        if egress.allow_out or egress.allow_names
        else None
    )
    if asked is not None:
        raise InvalidRequest(
            asked,
            "asks for a way out to other networks, but this server gives its sandboxes none "
            "(it runs with --network none); leave it out, or start the server with "
            "--network nat",
        )


def _refuse_restrictions(egress: Egress) -> None:
    asked = (
        "allow_internet_access"
        if egress.internet is False
        else "network.allowOut"
        if egress.allow_out or egress.allow_names
        else "network.denyOut"
        if egress.deny_out
        else None
    )
    if asked is not None:
        raise InvalidRequest(
            asked,
            "restricts the sandbox's network, but this server's sandboxes share the host's "
            "(it runs with --network host), which it cannot restrict; leave it out, or start "
            "the server with --network nat",
        )
