"""What the relay of sandboxes whose allow lists name hosts reads of a connection: the HTTP
`Host` on port 80, the TLS server name on port 443, and nothing else."""

from __future__ import annotations

import ssl
from ipaddress import IPv4Network

import pytest

from inspect_swarm.server.model._rules import BadInput, parse_allow_list
from inspect_swarm.server.sandboxes._network import resolvers
from inspect_swarm.server.sandboxes._relay import (
    HEAD_BYTES,
    Admission,
    matches,
    requested_name,
)


def client_hello(name: str | None) -> bytes:
    """The ClientHello python's TLS sends to a server named `name` (None: without SNI)."""
    outgoing = ssl.MemoryBIO()
    context = ssl.create_default_context()
    context.check_hostname = False
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_the_tls_server_name() -> None:
    hello = client_hello("www.Example.com")
    assert requested_name(hello, 443) == "www.Example.com"
    for cut in (3, 5, len(hello) - 1):  # more is needed
        assert requested_name(hello[:cut], 443) is None
    with pytest.raises(ValueError, match="without a server name"):
        requested_name(client_hello(None), 443)
    with pytest.raises(ValueError, match="not a TLS handshake"):
        requested_name(b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n", 443)


def test_the_http_host() -> None:
    request = b"GET / HTTP/1.1\r\nAccept: */*\r\nhost: example.com:8080\r\n\r\n"
    assert requested_name(request, 80) == "example.com"
    assert requested_name(request[:-2], 80) is None
    for lying in (
        b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",  # two hosts
        b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n",  # none
    ):
        with pytest.raises(ValueError, match="once"):
            requested_name(lying, 80)
    with pytest.raises(ValueError):  # a ClientHello on the HTTP port names nothing
        requested_name(client_hello("example.com"), 80)
    with pytest.raises(ValueError, match="within the bytes"):
        requested_name(b"GET / HTTP/1.1\r\nX: " + b"a" * HEAD_BYTES, 80)


def test_names_and_wildcards() -> None:
    assert matches("Example.COM.", "example.com")
    assert not matches("www.example.com", "example.com")
    assert matches("a.b.example.com", "*.example.com")
    assert not matches("example.com", "*.example.com")
    assert not matches("badexample.com", "*.example.com")


def test_an_allowed_address_or_name_passes() -> None:
    admission = Admission(
        "10.0.0.2", (IPv4Network("198.51.100.1/32"),), (IPv4Network("0.0.0.0/0"),), ("a.test",)
    )
    assert admission.permits("198.51.100.1", None)
    assert admission.permits("198.51.100.3", "a.test")
    assert not admission.permits("198.51.100.3", "b.test")
    assert not admission.permits("198.51.100.3", "198.51.100.1")


def test_the_allow_list_splits_addresses_and_names() -> None:
    networks, names = parse_allow_list("f", ["10.0.0.1", "PyPI.org.", "*.web.test", "10.1.0.0/16"])
    assert networks == (IPv4Network("10.0.0.1/32"), IPv4Network("10.1.0.0/16"))
    assert names == ("pypi.org", "*.web.test")
    for bad in ("1.2.3", "a..b", "*", "-a.test", "a.*.test", "::1", 7):
        with pytest.raises(BadInput):
            parse_allow_list("f", [bad])


def test_the_name_servers_of_resolv_conf() -> None:
    text = "# a comment\nnameserver 10.255.255.53\nnameserver ::1\nsearch x\nnameserver 9.9.9.9\n"
    assert resolvers(text) == (IPv4Network("10.255.255.53/32"), IPv4Network("9.9.9.9/32"))
