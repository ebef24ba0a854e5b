"""Attacks on the accounts a server manages while it runs: managing them without the `admin`
scope (with an account's key, an added account's, or a sandbox's key of the admin's own
account), and using keys that should be dead (a removed account's, its lease's and its
sandboxes', and a rotated key's old value).

Each is refused at once: 403 for a key without the scope (or a sandbox's), 401 for a key that
no longer opens anything.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..server.engines.test_sandboxes import TINY
from ..servers import KEY, Server, start_server, wait_until
from .conftest import in_sandbox, posted_from_inside

ADMIN_KEY = "admin-key"


@pytest.fixture(scope="module")
def share(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host directory every sandbox may write, where a sandbox leaves its key."""
    path = tmp_path_factory.mktemp("leaked")
    os.chmod(path, 0o777)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, share: Path) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("accounts") / "state"
    keys = (KEY, f"{ADMIN_KEY}:read,provision,admin")
    handle = start_server(state, "--memory-gib", "4", "--share", str(share), keys=keys)
    yield handle
    handle.kill(signal.SIGTERM)


def status(server: Server, key: str, method: str = "GET", path: str = "/api/swarms") -> int:
    with server.http(key) as http:
        return http.request(method, path).status_code


def add(server: Server, name: str, **body: object) -> dict[str, object]:
    with server.http(ADMIN_KEY) as http:
        answer = http.post("/admin/accounts", json={"name": name, **body})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


MANAGE = [
    ("POST", "/admin/accounts", {"name": "mallory"}),
    ("GET", "/admin/accounts", None),
    ("POST", "/admin/accounts/any/rotate", None),
    ("PATCH", "/admin/accounts/any", {"maxRunning": 100000}),
    ("DELETE", "/admin/accounts/any", None),
]

ASK_INSIDE = posted_from_inside(
    "/admin/accounts", {"name": "from-inside", "scopes": ["read", "provision"]}
)


def test_no_key_without_the_admin_scope_manages_accounts(server: Server) -> None:
    plain = str(add(server, "plain")["apiKey"])
    for key in (KEY, plain):
        for method, path, body in MANAGE:
            with server.http(key) as http:
                answer = http.request(method, path, json=body)
            assert answer.status_code == 403, (key, method, path, answer.text)
            assert answer.json()["code"] == "insufficient_scope"
    with server.http("guessed") as http:
        assert http.get("/admin/accounts").status_code == 401
    # an added account never holds the admin scope, whoever asks
    with server.http(ADMIN_KEY) as http:
        answer = http.post("/admin/accounts", json={"name": "root2", "scopes": ["admin"]})
    assert answer.status_code == 400 and answer.json()["field"] == "scopes.0"
    # a sandbox of the admin's own account is given a key that acts for it, but not this
    inside = in_sandbox(server, ASK_INSIDE, ADMIN_KEY)
    assert str(inside["stdoutTail"]).split() == ["403", "sandbox_key"], inside
    with server.http(ADMIN_KEY) as http:
        names = [account["name"] for account in http.get("/admin/accounts").json()["accounts"]]
        assert "from-inside" not in names and "mallory" not in names
        assert http.delete("/v1/servers/lease").status_code == 200


def test_a_removed_accounts_keys_and_its_sandboxes_keys_stop_working_at_once(
    server: Server, share: Path
) -> None:
    key = str(add(server, "victim")["apiKey"])
    leaked = share / "victim-key"
    with server.client(key) as victim:
        lease_key = victim.servers.lease()["apiKey"]
        victim.swarms.start(f'echo "$MARITIME_API_KEY" > {leaked}; sleep 300', count=1, size=TINY)
        wait_until(lambda: leaked.exists() and leaked.read_text().strip(), timeout=60)
    sandbox_key = leaked.read_text().strip()
    keys = {"account": key, "lease": lease_key, "sandbox": sandbox_key}
    assert {name: status(server, k) for name, k in keys.items()} == dict.fromkeys(keys, 200)
    with server.http(ADMIN_KEY) as http:
        assert http.delete("/admin/accounts/victim").status_code == 200
    assert {name: status(server, k) for name, k in keys.items()} == dict.fromkeys(keys, 401)
    # its lease ended with it: the server is free for another account
    with server.http(KEY) as http:
        assert http.get("/v1/servers").json()["servers"][0]["state"] == "available"


def test_a_rotated_keys_old_value_and_its_lease_key_are_refused(server: Server) -> None:
    old = str(add(server, "rotating")["apiKey"])
    with server.http(old) as http:
        old_lease_key = http.post("/v1/servers/lease").json()["apiKey"]
    with server.http(ADMIN_KEY) as http:
        new = http.post("/admin/accounts/rotating/rotate").json()["apiKey"]
    assert new != old
    assert status(server, old) == 401 and status(server, old_lease_key) == 401
    assert status(server, new) == 200
    with server.http(new) as http:
        lease = http.post("/v1/servers/lease").json()
        assert lease["apiKey"] != old_lease_key and status(server, lease["apiKey"]) == 200
        assert http.delete("/v1/servers/lease").status_code == 200
