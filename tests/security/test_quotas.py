"""Attacks on the server's capacity with a valid key: queueing without end, starting runs as
fast as the server takes them, and running or booking more at once than the account may, with
the account's key and with a sandbox's.

Each start past the account's quotas is answered 429 `quota_exceeded`, saying what is left
and, where it is known, when more is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..servers import KEY, Server
from .conftest import in_sandbox, posted_from_inside, served

MAX_QUEUED = 10
RUNS_PER_MINUTE = 3
SMALL = {"vcpus": 1, "memoryGb": 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    quotas = ("--max-queued", str(MAX_QUEUED), "--runs-per-minute", str(RUNS_PER_MINUTE))
    yield from served(tmp_path_factory, "quotas", "--memory-gib", "2", *quotas)


def start(server: Server, count: int, command: str = "true") -> tuple[int, dict[str, str], Any]:
    """POST a run of `count` sandboxes, one at a time: the status, headers and body."""
    body = {"command": command, "count": count, "size": SMALL, "concurrency": 1}
    with server.http() as http:
        answer = http.post("/api/swarms", json=body)
    return answer.status_code, dict(answer.headers), answer.json()


INSIDE = posted_from_inside(
    "/api/swarms", {"command": "true", "count": 5, "size": {"vcpus": 1, "memoryGb": 1}}
)


def test_starts_past_the_accounts_quotas_are_refused_with_what_is_left_and_when(
    server: Server,
) -> None:
    # one sandbox at a time: seven of eight wait
    status, _, first = start(server, 8, "sleep 120")
    assert status == 201, first
    status, headers, refused = start(server, 5)
    assert status == 429 and refused["code"] == "quota_exceeded", refused
    assert refused["detail"].startswith("sandboxes queued: ")
    assert f"of {MAX_QUEUED} wait to start" in refused["detail"] and "left" in refused["detail"]
    assert "retry-after" not in headers  # nobody knows when queued sandboxes start
    # a sandbox's key counts against its account: five more are refused to it too
    inside = in_sandbox(server, INSIDE)
    assert str(inside["stdoutTail"]).split() == ["429", "quota_exceeded"], inside
    with server.client(KEY) as client:
        client.swarms.cancel(first["id"])
    # runs per minute: the first and the sandbox's run count, refused starts do not
    assert start(server, 1)[0] == 201
    status, headers, refused = start(server, 1)
    assert status == 429 and refused["detail"].startswith(
        f"runs per minute: {RUNS_PER_MINUTE} of {RUNS_PER_MINUTE} started in the last minute"
    )
    assert 0 < int(headers["retry-after"]) <= 60


@pytest.fixture(scope="module")
def room(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose accounts may have 3 sandboxes running and 3 GB booked."""
    quotas = ("--max-running", "3", "--max-memory-gb", "3")
    yield from served(tmp_path_factory, "room", "--memory-gib", "4", *quotas)


def test_sandboxes_running_and_memory_booked_are_counted_for_runs_sandboxes_and_their_keys(
    room: Server,
) -> None:
    # four sandboxes, two at a time: two running and 2 GB booked from the start
    body = {"command": "sleep 120", "count": 4, "size": SMALL, "concurrency": 2}
    with room.http() as http:
        first = http.post("/api/swarms", json=body).json()
        refused = http.post("/v1/sandboxes", json={"size": {"vcpus": 1, "memoryGb": 2}})
    assert refused.status_code == 429, refused.text
    assert refused.json()["detail"].startswith("memory booked: 2 of 3 GB booked, 1 GB left")
    # the third may run; from inside it, a sandbox's key asks for four more at once
    inside = in_sandbox(room, INSIDE)
    assert str(inside["stdoutTail"]).split() == ["429", "quota_exceeded"], inside
    with room.client(KEY) as client:
        client.swarms.cancel(first["id"])
