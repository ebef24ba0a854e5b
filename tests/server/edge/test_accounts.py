"""Accounts managed while the server runs (`/admin/accounts`), through both clients: added
with quotas of their own, listed, rotated and removed, with no restart."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from inspect_swarm.client import AsyncSwarmsClient, AuthenticationError, RateLimitError

from ...servers import KEY, Server, needs_namespaces, start_server

pytestmark = needs_namespaces

ADMIN_KEY = "admin-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with 4 GiB to book, the test key and a key that manages accounts."""
    state = tmp_path_factory.mktemp("accounts") / "state"
    keys = (KEY, f"{ADMIN_KEY}:read,provision,admin")
    handle = start_server(state, "--memory-gib", "4", "--max-running", "3", keys=keys)
    handle.conform = True  # every answer as the OpenAPI document says
    yield handle
    handle.kill(signal.SIGTERM)


def test_an_account_added_runs_under_its_own_quotas_and_is_rotated_and_removed(
    server: Server,
) -> None:
    with server.client(ADMIN_KEY) as admin:
        added = admin.accounts.add("team-a", max_running=1)
        key = added["apiKey"]
        assert key.startswith("isk_") and added["scopes"] == ["provision", "read"]
        assert added["quotas"]["maxRunning"] == 1 and added["ownQuotas"] == ["maxRunning"]
        assert added["quotas"]["maxQueued"] == 20_000  # the server's default
        listed = admin.accounts.list()
        assert [a["name"] for a in listed] == ["team-a"] and "apiKey" not in listed[0]
        with server.client(key, max_retries=0) as team:
            # its own quota: one sandbox at a time, where the server's default is three
            with pytest.raises(RateLimitError) as refused:
                team.swarms.start("true", count=2, size="1x1", concurrency=2)
            assert "sandboxes running: 0 of 1 may run at once, 1 left" in refused.value.message
            first = team.swarms.start("sleep 60", count=1, size="1x1")
            admin.accounts.set_quotas("team-a", max_running=None)  # the default again
            second = team.swarms.start("true", count=2, size="1x1", concurrency=2)
            assert second["id"] != first["id"]
            team.swarms.cancel(first["id"])

        rotated = admin.accounts.rotate("team-a")
        assert rotated["id"] == added["id"] and rotated["apiKey"] != key
        assert rotated["rotatedAt"] is not None
        with server.client(key, max_retries=0) as old, pytest.raises(AuthenticationError):
            old.swarms.list()
        with server.client(rotated["apiKey"]) as team:
            assert {run["id"] for run in team.swarms.list()} == {first["id"], second["id"]}

        admin.accounts.set_quotas("team-a", max_queued=7)
        removed = admin.accounts.remove("team-a")
        assert (removed["name"], removed["quotas"]["maxQueued"]) == ("team-a", 7)
        assert admin.accounts.list() == []
        with (
            server.client(rotated["apiKey"], max_retries=0) as gone,
            pytest.raises(AuthenticationError),
        ):
            gone.swarms.list()


@pytest.mark.anyio
async def test_the_async_client_manages_accounts(server: Server) -> None:
    async with AsyncSwarmsClient(ADMIN_KEY, server.url) as admin:
        added = await admin.accounts.add("team-async", scopes=["read"], max_queued=5)
        assert added["scopes"] == ["read"] and added["quotas"]["maxQueued"] == 5
        assert "team-async" in [a["name"] for a in await admin.accounts.list()]
        changed = await admin.accounts.set_quotas("team-async", max_queued=None)
        assert changed["ownQuotas"] == [] and changed["quotas"]["maxQueued"] == 20_000
        rotated = await admin.accounts.rotate("team-async")
        assert rotated["apiKey"] != added["apiKey"]
        assert (await admin.accounts.remove("team-async"))["id"] == added["id"]


def test_the_openapi_document_declares_the_accounts_routes(server: Server) -> None:
    with server.http(None) as http:
        paths = http.get("/openapi.json").json()["paths"]
    assert set(paths["/admin/accounts"]) == {"get", "post"}
    assert set(paths["/admin/accounts/{name}"]) == {"patch", "delete"}
    assert "post" in paths["/admin/accounts/{name}/rotate"]
