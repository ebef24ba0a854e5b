"""`/v1/sandboxes` (long-lived sandboxes) and what ends with a lease, against a real server."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from inspect_swarm.cli._main import main
from inspect_swarm.client import AuthenticationError, ConflictError, NotFoundError

from ...servers import (
    KEY,
    OTHER_KEY,
    READ_ONLY_KEY,
    Server,
    needs_namespaces,
    point_e2b_at,
    start_server,
    wait_for,
    wait_until,
)

pytestmark = needs_namespaces

TINY = "1x1"


def test_create_get_list_and_kill(server: Server) -> None:
    with server.client() as client:
        made = client.sandboxes.create(
            template="python",
            size=TINY,
            timeout_seconds=120,
            env={"MODE": "fast"},
            metadata={"job": "42"},
        )
        sandbox_id = made["sandboxId"]
        assert sandbox_id.startswith("sbx-")
        assert (made["status"], made["template"], made["metadata"]) == (
            "running",
            "python",
            {"job": "42"},
        )
        assert made["size"] == {"name": "custom", "vcpus": 1, "memoryGb": 1}
        assert made["swarmId"] is None and made["endedAt"] is None and made["endAt"]
        lease = client.servers.lease()
        assert made["leaseId"] == lease["id"] and lease["memoryUsedGib"] == 1
        # what the E2B sandbox daemon needs: one address for every sandbox, and a token
        assert made["envdUrl"] == server.url and made["envdAccessToken"]
        assert client.sandboxes.get(sandbox_id) == made
        assert [s["sandboxId"] for s in client.sandboxes.list()] == [sandbox_id]

        ended = client.sandboxes.kill(sandbox_id)
        assert (ended["status"], ended["endReason"]) == ("ended", "killed")
        assert ended["endedAt"] and "envdAccessToken" not in ended
        assert client.sandboxes.get(sandbox_id) == ended  # its record is kept
        assert client.sandboxes.kill(sandbox_id) == ended  # and killing it again is harmless
        assert client.sandboxes.list() == []
        assert client.servers.lease()["memoryUsedGib"] == 0
        client.servers.release()


def test_newest_first_and_the_default_size(server: Server) -> None:
    with server.http() as http:
        first = http.post("/v1/sandboxes").json()  # no body: every default
        second = http.post("/v1/sandboxes", json={"size": {"vcpus": 1, "memoryGb": 1}}).json()
        listed = http.get("/v1/sandboxes").json()["sandboxes"]
        assert [s["sandboxId"] for s in listed] == [second["sandboxId"], first["sandboxId"]]
        assert first["size"] == {"name": "small", "vcpus": 2, "memoryGb": 4}
        assert first["template"] == "base"
        for made in (first, second):
            assert http.delete(f"/v1/sandboxes/{made['sandboxId']}").status_code == 200
        http.delete("/v1/servers/lease")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"size": {"memoryGb": 9}}, "size.memoryGb"),
        ({"size": {"vcpus": 3}}, "size.vcpus"),
        ({"timeoutSeconds": 0}, "timeoutSeconds"),
        ({"timeoutSeconds": 21601}, "timeoutSeconds"),
        ({"timeoutSeconds": "60"}, "timeoutSeconds"),
        ({"template": "nope"}, "template"),
        ({"image": "alpine:3"}, "image"),
        ({"metadata": {"job": 42}}, "metadata"),
        ({"env": ["A=1"]}, "env"),
        ({"colour": "red"}, "colour"),
        ([1], "body"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(server: Server, body: object, field: str) -> None:
    with server.http() as http:
        response = http.post("/v1/sandboxes", json=body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["field"] == field
    assert field.split(".")[0] in error["detail"]


def test_keys_ids_and_accounts(server: Server) -> None:
    with server.http(None) as http:
        assert http.post("/v1/sandboxes", json={}).status_code == 401
    with server.http(READ_ONLY_KEY) as http:
        refused = http.post("/v1/sandboxes", json={})
        assert (refused.status_code, refused.json()["code"]) == (403, "insufficient_scope")
    with server.client() as client:
        for call in (client.sandboxes.get, client.sandboxes.kill):
            with pytest.raises(NotFoundError):
                call("sbx-nothere")
        made = client.sandboxes.create(size=TINY)
        with server.client(READ_ONLY_KEY) as stranger, pytest.raises(NotFoundError):
            stranger.sandboxes.get(made["sandboxId"])  # another account's
        # a run's sandbox ends with its run, not on its own
        run = client.swarms.start("true", count=1, size=TINY)
        run_sandbox = wait_for(client, run["id"])["sandboxes"][0]["sandboxId"]
        with pytest.raises(ConflictError) as refused_kill:
            client.sandboxes.kill(run_sandbox)
        assert refused_kill.value.code == "swarm_sandbox"
        assert f"/api/swarms/{run['id']}/cancel" in refused_kill.value.message
        assert client.sandboxes.get(run_sandbox)["swarmId"] == run["id"]
        client.sandboxes.kill(made["sandboxId"])
        client.servers.release()


def test_memory_and_the_lease_are_shared_with_runs(server: Server) -> None:
    with server.client() as client:
        halves = [client.sandboxes.create(size="1x4") for _ in range(2)]
        with server.http() as http:
            full = http.post("/v1/sandboxes", json={"size": {"vcpus": 1, "memoryGb": 1}})
        assert (full.status_code, full.json()["code"]) == (429, "memory_full")
        assert "8/8 GiB" in full.json()["detail"]
        with server.client(OTHER_KEY) as other, pytest.raises(ConflictError) as busy:
            other.sandboxes.create(size=TINY)
        assert busy.value.code == "server_busy"
        for half in halves:
            client.sandboxes.kill(half["sandboxId"])
        client.servers.release()


AGENT = """
import json, os, urllib.request
request = urllib.request.Request(
    os.environ["MARITIME_API_URL"] + "/v1/sandboxes",
    data=json.dumps({"size": {"vcpus": 1, "memoryGb": 1}, "metadata": {"made": "inside"}}).encode(),
    headers={"Authorization": "Bearer " + os.environ["MARITIME_API_KEY"],
             "Content-Type": "application/json"},
)
print(json.load(urllib.request.urlopen(request))["sandboxId"])
"""


def test_releasing_the_lease_fails_the_run_and_ends_every_sandbox(server: Server) -> None:
    with server.client() as client:
        # sandbox 0 is an agent that makes a child sandbox with the lease key, then works on
        run = client.swarms.start(
            '[ "$MARITIME_SWARM_INDEX" = 0 ] && python3 /agent.py; sleep 60',
            count=3,
            concurrency=1,
            size=TINY,
            files={"/agent.py": AGENT},
        )
        wait_until(lambda: len(client.sandboxes.list()) == 1)
        (child,) = client.sandboxes.list()
        lease = client.servers.lease()
        assert (child["metadata"], child["leaseId"]) == ({"made": "inside"}, lease["id"])
        assert client.swarms.get(run["id"])["error"] is None
        assert client.swarms.get(run["id"])["counts"]["queued"] == 2

        client.servers.release()
        done = wait_for(client, run["id"], timeout=20)
        error = done["error"]
        assert error == "the server's lease ended (released): every sandbox on it was ended"
        # the queued sandboxes fail with the run's error, and so does the running one
        assert [(s["status"], s["error"]) for s in done["sandboxes"]] == [("failed", error)] * 3
        assert [s["startedAt"] is None for s in done["sandboxes"]] == [False, True, True]
        assert done["status"] == "completed"
        ended = client.sandboxes.get(child["sandboxId"])
        assert (ended["status"], ended["endReason"]) == ("ended", "lease released")
    with server.client(lease["apiKey"]) as agent, pytest.raises(AuthenticationError):
        agent.sandboxes.create(size=TINY)  # the lease key stopped working


def test_a_sandbox_ends_when_its_timeout_passes(server: Server) -> None:
    with server.client() as client:
        made = client.sandboxes.create(size=TINY, timeout_seconds=1)
        wait_until(lambda: client.sandboxes.get(made["sandboxId"])["status"] == "ended")
        assert client.sandboxes.get(made["sandboxId"])["endReason"] == "timeout"
        client.servers.release()


def test_used_through_the_unmodified_e2b_sdk(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    e2b = pytest.importorskip("e2b")
    point_e2b_at(server, monkeypatch)
    with server.client() as client:
        made = client.sandboxes.create(size=TINY, env={"GREETING": "hello"})
        sandbox = e2b.Sandbox.connect(made["sandboxId"])
        result = sandbox.commands.run("hostname; echo $GREETING $MARITIME_SERVER_LEASE_ID")
        assert result.stdout.split() == [made["sandboxId"], "hello", made["leaseId"]]
        sandbox.kill()
        assert client.sandboxes.get(made["sandboxId"])["endReason"] == "killed"
        client.servers.release()


def test_the_cli(
    server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MARITIME_API_URL", server.url)
    monkeypatch.setenv("MARITIME_API_KEY", KEY)

    def run(*args: str) -> Any:
        assert main(["sandboxes", *args, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    made = run("create", "--size", "1x1", "--timeout", "2m", "--metadata", "job=7")
    assert (made["metadata"], made["size"]["memoryGb"]) == ({"job": "7"}, 1)
    assert run("get", made["sandboxId"])["status"] == "running"
    assert [s["sandboxId"] for s in run("list")] == [made["sandboxId"]]
    assert run("kill", made["sandboxId"])["endReason"] == "killed"
    assert main(["sandboxes", "get", "sbx-nothere"]) == 1
    assert "not_found" in capsys.readouterr().err
    with server.client() as client:
        client.servers.release()


def test_records_survive_a_killed_server(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = start_server(state, "--memory-gib", "2")
    try:
        with first.client() as client:
            made = client.sandboxes.create(size=TINY)
    finally:
        first.kill(signal.SIGKILL)
    second = start_server(state, "--memory-gib", "2")
    try:
        with second.client() as client:
            ended = client.sandboxes.get(made["sandboxId"])
            assert (ended["status"], ended["endReason"]) == (
                "ended",
                "server restarted while the sandbox was alive",
            )
            assert client.sandboxes.list() == []
    finally:
        second.kill()
