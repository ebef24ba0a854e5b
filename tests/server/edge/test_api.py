"""The REST surface: validation, auth, idempotency, errors, leases (against a real server)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from inspect_swarm.client import AuthenticationError, ConflictError, NotFoundError

from ...servers import (
    KEY,
    OTHER_KEY,
    READ_ONLY_KEY,
    Server,
    needs_namespaces,
    start_server,
    wait_for,
    wait_until,
)

pytestmark = needs_namespaces

OK = {"command": "true", "count": 1, "size": {"vcpus": 1, "memoryGb": 1}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"count": 1}, "command"),
        ({"command": "", "count": 1}, "command"),
        ({"command": 5, "count": 1}, "command"),
        ({"command": "x"}, "count"),
        ({"command": "x", "count": 2, "inputs": [{}]}, "count"),
        ({"command": "x", "count": "2"}, "count"),
        ({"command": "x", "count": 0}, "count"),
        ({"command": "x", "count": 1, "size": {"vcpus": 3}}, "size.vcpus"),
        ({"command": "x", "count": 1, "size": {"memoryGb": 9}}, "size.memoryGb"),
        ({"command": "x", "count": 1, "size": {"memoryGb": 0}}, "size.memoryGb"),
        ({"command": "x", "count": 1, "timeoutSeconds": 0}, "timeoutSeconds"),
        ({"command": "x", "count": 1, "timeoutSeconds": 21601}, "timeoutSeconds"),
        ({"command": "x", "count": 1, "timeoutSeconds": "10"}, "timeoutSeconds"),
        ({"command": "x", "count": 1, "concurrency": 1000}, "concurrency"),
        ({"command": "x", "count": 1, "resultPath": "out.json"}, "resultPath"),
        ({"command": "x", "inputs": [{"files": {"rel.txt": "a"}}]}, "inputs.0.files"),
        ({"command": "x", "inputs": [{"argz": []}]}, "inputs.0.argz"),
        ({"command": "x", "count": 1, "colour": "red"}, "colour"),
        ({"command": "x", "count": 1, "image": "alpine:3"}, "image"),
        ({"command": "x", "count": 1, "template": "nope"}, "template"),
        ([1, 2], "body"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(server: Server, body: object, field: str) -> None:
    with server.http() as http:
        response = http.post("/api/swarms", json=body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["field"] == field
    assert error["code"] in ("invalid_request", "image_unsupported", "template_not_found")
    assert field.split(".")[0] in error["detail"]
    assert "Traceback" not in response.text


def test_bad_json_is_400(server: Server) -> None:
    with server.http() as http:
        response = http.post(
            "/api/swarms", content=b"{not json", headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert "not valid JSON" in response.json()["detail"]


def test_keys_are_required_and_scoped(server: Server) -> None:
    with server.http(None) as http:
        missing = http.get("/api/swarms")
    with server.http("wrong") as http:
        wrong = http.get("/api/swarms")
    with server.http(READ_ONLY_KEY) as http:
        listed = http.get("/api/swarms")
        start = http.post("/api/swarms", json=OK)
    assert (missing.status_code, missing.json()["code"]) == (401, "unauthorized")
    assert (wrong.status_code, wrong.json()["code"]) == (401, "unauthorized")
    assert listed.status_code == 200
    assert (start.status_code, start.json()["code"]) == (403, "insufficient_scope")
    assert "provision" in start.json()["detail"]
    with server.client(READ_ONLY_KEY) as client, pytest.raises(AuthenticationError):
        client.swarms.start("true", count=1)


def test_unknown_ids_are_404(server: Server) -> None:
    with server.client() as client:
        for call in (client.swarms.get, client.swarms.results, client.swarms.cancel):
            with pytest.raises(NotFoundError) as caught:
                call("no-such-run")
            assert caught.value.code == "not_found"
        with pytest.raises(NotFoundError):
            client.sandboxes.get("sbx-nothere")
    with server.http() as http:
        assert http.get("/api/nothing").json()["code"] == "not_found"


def test_idempotent_retries(server: Server) -> None:
    key = str(uuid.uuid4())
    with server.http() as http:
        first = http.post("/api/swarms", json=OK, headers={"Idempotency-Key": key})
        again = http.post("/api/swarms", json=OK, headers={"Idempotency-Key": key})
        in_body = http.post("/api/swarms", json={**OK, "idempotencyKey": key})
        other = http.post("/api/swarms", json={**OK, "count": 2}, headers={"Idempotency-Key": key})
    assert first.status_code == 201
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert in_body.status_code == 200 and in_body.json()["id"] == first.json()["id"]
    assert (other.status_code, other.json()["code"]) == (409, "idempotency_conflict")
    with server.client() as client:
        wait_for(client, first.json()["id"])


def test_racing_identical_starts_make_one_run(server: Server) -> None:
    key = str(uuid.uuid4())
    answers: list[tuple[int, str]] = []

    def start() -> None:
        with server.http() as http:
            response = http.post("/api/swarms", json=OK, headers={"Idempotency-Key": key})
            answers.append((response.status_code, response.json()["id"]))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({run_id for _, run_id in answers}) == 1
    assert sorted(status for status, _ in answers) == [200] * 7 + [201]
    with server.client() as client:
        mine = [r for r in client.swarms.list() if r["id"] == answers[0][1]]
        assert len(mine) == 1
        wait_for(client, answers[0][1])


def test_list_is_newest_first_and_per_account(server: Server) -> None:
    with server.client() as client:
        first = client.swarms.start("true", count=1, size="1x1", name="first")
        second = client.swarms.start("true", count=1, size="1x1", name="second")
        ids = [r["id"] for r in client.swarms.list()]
        assert ids.index(second["id"]) < ids.index(first["id"])
        wait_for(client, first["id"])
        wait_for(client, second["id"])
    with server.client(READ_ONLY_KEY) as reader:
        assert all(r["id"] != first["id"] for r in reader.swarms.list())


def test_access_servers_and_lease(server: Server) -> None:
    with server.client() as client:
        assert client.swarms.access()["access"] is True
        lease = client.servers.lease()
        assert lease["apiKey"].startswith("mlk_")
        assert lease["env"]["MARITIME_SERVER_LEASE_ID"] == lease["id"]
        assert lease["env"]["E2B_API_KEY"] == lease["apiKey"]
        servers = client.servers.list()
        assert servers["servers"][0]["state"] == "yours"
        assert servers["lease"]["id"] == lease["id"] and servers["eligible"] is True
        # the lease key works as a key of the same account
        with server.client(lease["apiKey"]) as agent:
            assert agent.servers.list()["lease"]["id"] == lease["id"]
        with server.client(OTHER_KEY) as other:
            assert other.servers.list()["servers"][0]["state"] == "busy"
            with pytest.raises(ConflictError) as busy:
                other.swarms.start("true", count=1)
            assert (busy.value.status, busy.value.code) == (409, "server_busy")
            with pytest.raises(ConflictError):
                other.servers.lease()
        released = client.servers.release()
        assert released["releaseReason"] == "released" and released["releasedAt"]
        with server.client(lease["apiKey"]) as agent, pytest.raises(AuthenticationError):
            agent.servers.list()
        with server.client(OTHER_KEY) as other:
            run = other.swarms.start("true", count=1, size="1x1")
            wait_for(other, run["id"])
            other.servers.release()
    assert KEY != OTHER_KEY


def test_an_idle_lease_is_released_and_a_run_keeps_it_busy(tmp_path: Path) -> None:
    idle = start_server(
        tmp_path / "state", "--memory-gib", "2", "--idle-release", "1", "--isolation", "process"
    )
    try:
        with idle.client() as client:
            # the run outlasts the idle time: its lease must hold until it ends
            run = wait_for(client, client.swarms.start("sleep 3", count=1, size="1x1")["id"])
            assert run["error"] is None and run["sandboxes"][0]["status"] == "succeeded"
            wait_until(lambda: client.servers.list()["servers"][0]["state"] == "available")
            assert client.servers.list()["lease"] is None
    finally:
        idle.kill()
