"""Attacks on the server's edge: input no system call takes, bodies too large, too deep or too
slow, connections held open, and errors that would stop the scheduler or drop a connection.

Each must be answered (a 400 naming the field, a 413, a 408, a closed connection) and leave
the server whole: its scheduler running, `/healthz` ok, the next run completing.
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import socket
import sqlite3
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from inspect_swarm.server._serve import assemble
from inspect_swarm.server.domain._server import SwarmServer
from inspect_swarm.server.edge._app import create_app
from inspect_swarm.server.model._types import Settings
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost, base_cgroup_name

from ..server.engines.test_sandboxes import TINY, local, run_to_completion
from ..servers import KEY, OTHER_KEY, Server, start_server, wait_for, wait_until
from .conftest import in_sandbox

__all__ = ["local"]  # a fixture

MIB = 1024**2
_CLAIMS = Path("/run/inspect-swarm")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with short read deadlines, a small per-sandbox share of connections and a
    small file limit, so that each attack shows quickly."""
    handle = start_server(
        tmp_path_factory.mktemp("edge") / "state",
        "--memory-gib",
        "8",
        "--read-timeout",
        "3",
        "--max-sandbox-connections",
        "8",
        "--max-file-mib",
        "1",
        "--disk-gib",
        "3",
    )
    yield handle
    handle.kill(signal.SIGTERM)


def start_body(**fields: Any) -> dict[str, Any]:
    return {"command": "true", "count": 1, "size": {"vcpus": 1, "memoryGb": 1}, **fields}


def assert_whole(server: Server) -> None:
    """The server answers, its scheduler runs, and a run started now completes."""
    assert server.health()["status"] == "ok"
    with server.client() as client:
        run = client.swarms.start("echo whole", count=1, size=TINY)
        done = wait_for(client, run["id"])
    assert done["sandboxes"][0]["status"] == "succeeded"
    assert done["sandboxes"][0]["stdoutTail"] == "whole\n"


def rss_bytes(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def address(server: Server) -> tuple[str, int]:
    parts = urlsplit(server.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


# input no system call takes, and sizes past the kernel's

ARG = 200 * 1024
BAD_STARTS: list[tuple[str, dict[str, Any]]] = [
    ("resultPath", start_body(resultPath="/tmp/a\0b")),
    ("files", start_body(files={"/tmp/a\0b": "x"})),
    ("inputs.1.files", {**start_body(count=None), "inputs": [{}, {"files": {"/a\0": ""}}]}),
    ("command", start_body(command="echo \0")),
    ("command.1", start_body(command=["echo", "a\0b"])),
    ("inputs.0.args.1", {**start_body(count=None), "inputs": [{"args": ["a", "\0"]}]}),
    ("env", start_body(env={"A=B": "x"})),
    ("env", start_body(env={"": "x"})),
    ("env", start_body(env={"1A": "x"})),
    ("env.A", start_body(env={"A": "x\0y"})),
    ("inputs.0.env", {**start_body(count=None), "inputs": [{"env": {"B C": "x"}}]}),
    ("resultPath", start_body(resultPath="/tmp/a\nb")),
    ("resultPath", start_body(resultPath="/" + "a" * 5000)),
    ("files", start_body(files={"/tmp/" + "b" * 300: "x"})),
    ("name", start_body(name="n" * 1024 * 1024)),
    ("name", start_body(name="run\x1b[2J")),
    ("idempotencyKey", start_body(idempotencyKey="k" * 1000)),
    ("command", start_body(command="x" * 1024 * 1024)),
    ("env", start_body(env={f"V{i}": "v" * 100_000 for i in range(25)})),
    (
        "command",
        start_body(
            command=["echo", *["a" * 100_000] * 11], env={f"V{i}": "v" * 100_000 for i in range(10)}
        ),
    ),
    ("inputs.1", {**start_body(count=None), "inputs": [{}, {"args": ["a" * ARG]}]}),
    ("env", start_body(env={"BIG": "v" * ARG})),
    ("command.0", start_body(command=[""])),
    ("command.0", start_body(command=["", "echo"])),
    ("files", start_body(files={"/": "x"})),
    ("inputs.0.files", {**start_body(count=None), "inputs": [{"files": {"/tmp/..": "x"}}]}),
    ("resultPath", start_body(resultPath="/tmp/")),
]


@pytest.mark.parametrize(("field", "body"), BAD_STARTS, ids=[f for f, _ in BAD_STARTS])
def test_a_start_no_sandbox_could_run_is_refused_with_its_field(
    server: Server, field: str, body: dict[str, Any]
) -> None:
    with server.http() as http:
        response = http.post("/api/swarms", json=body)
    assert response.status_code == 400, response.text[:300]
    assert response.json()["field"] == field
    assert response.json()["detail"].startswith(f"{field}: ")
    assert len(response.text) < 1000  # the bad value is shown cut short


def test_after_every_refusal_the_scheduler_runs_on(server: Server) -> None:
    with server.http() as http:
        for _, body in BAD_STARTS[:3]:
            http.post("/api/swarms", json=body)
        runs = http.get("/api/swarms").json()["swarms"]
    assert runs == [] or all(run["status"] == "completed" for run in runs)
    assert_whole(server)


def test_a_sandbox_or_idempotency_key_no_system_call_takes_is_refused(server: Server) -> None:
    with server.http() as http:
        refused = [
            http.post("/v1/sandboxes", json={"env": {"A=B": "x"}}),
            http.post("/v1/sandboxes", json={"metadata": {"k": "v" * 5000}}),
            http.post("/v1/sandboxes", json={"metadata": {f"k{i}": "" for i in range(100)}}),
            http.post("/api/swarms", json=start_body(), headers={"Idempotency-Key": "k" * 300}),
        ]
    fields = [response.json().get("field") for response in refused]
    assert [r.status_code for r in refused] == [400] * 4
    assert fields == ["env", "metadata.k", "metadata", "Idempotency-Key"]


# JSON and bodies


def test_json_nested_deeply_is_a_400(server: Server) -> None:
    with server.http() as http:
        for data in ("[" * 100_000 + "]" * 100_000, '{"a":' * 40 + "1" + "}" * 40):
            response = http.post("/api/swarms", content=data)
            assert response.status_code == 400
            assert response.json()["detail"].startswith("body: JSON nested deeper than 32")
        # what is not text, or not JSON at all, is a 400 too
        for data in (b'{"command": "\\ud800", "count": 1}', b'{"count": 1' + b"0" * 5000 + b"}"):
            response = http.post("/api/swarms", content=data)
            assert response.status_code == 400, response.text


def send_body(server: Server, declared: int | None, total: int) -> tuple[bytes, int]:
    """POST `total` bytes of body (declared, or chunked) until the server answers; its answer
    (read until it closes the connection) and how much was sent by then."""
    sock = socket.create_connection(address(server), timeout=10)
    framing = f"Content-Length: {declared}" if declared else "Transfer-Encoding: chunked"
    head = (
        f"POST /api/swarms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n{framing}\r\n\r\n"
    )
    sock.sendall(head.encode())
    chunk, sent = b"x" * (256 * 1024), 0
    data = chunk if declared else b"%x\r\n%s\r\n" % (len(chunk), chunk)
    with sock:
        while sent < total and not select.select([sock], [], [], 0)[0]:
            if select.select([], [sock], [], 0.01)[1]:
                try:
                    sock.send(data)
                except OSError:
                    break  # closed by the server
                sent += len(chunk)
        answer = b""
        with contextlib.suppress(OSError):
            while part := sock.recv(65536):
                answer += part
    return answer, sent


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_is_refused_early_and_not_buffered(
    server: Server, declared: bool
) -> None:
    before = rss_bytes(server)
    answer, sent = send_body(server, 200 * MIB if declared else None, 200 * MIB)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"code": "body_too_large"' in answer
    assert sent < 64 * MIB  # refused long before the end
    assert rss_bytes(server) - before < 48 * MIB
    assert server.health()["status"] == "ok"


# connections


def test_half_open_connections_are_closed_after_the_read_timeout(server: Server) -> None:
    socks = [socket.create_connection(address(server)) for _ in range(60)]
    for i, sock in enumerate(socks):
        sock.sendall([b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"G"][i % 3])
    # one more trickles its head in, a byte at a time
    slow = socket.create_connection(address(server))
    started = time.monotonic()
    for byte in b"GET /healthz HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxx\r\n":
        try:
            slow.sendall(bytes([byte]))
        except OSError:
            break
        time.sleep(0.2)
    for sock in [*socks, slow]:
        sock.settimeout(10)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(100) == b""  # closed by the server
        sock.close()
    assert time.monotonic() - started < 8


@pytest.mark.parametrize("pieces", [1, 64], ids=["at-once", "in-pieces"])
def test_a_head_over_16_kib_is_refused_however_it_arrives(server: Server, pieces: int) -> None:
    line = f"X-Long: {'a' * 100_000}\r\n".encode()
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + line + b"\r\n"
    with socket.create_connection(address(server), timeout=10) as sock:
        size = -(-len(head) // pieces)
        with contextlib.suppress(OSError):  # the server may close before the last piece
            for start in range(0, len(head), size):
                sock.sendall(head[start : start + size])
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    # a head just under the limit is served
    with socket.create_connection(address(server), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 15_000 + b"\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_a_body_that_stalls_is_answered_408(server: Server) -> None:
    with socket.create_connection(address(server), timeout=10) as sock:
        head = (
            f"POST /api/swarms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            'Content-Length: 100\r\n\r\n{"command"'
        )
        sock.sendall(head.encode())
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert b"connection: close" in answer.lower()


def test_an_unexpected_error_is_a_json_500_on_a_connection_that_stays_usable(
    server: Server,
) -> None:
    host, port = address(server)
    connection = HTTPConnection(host, port, timeout=30)
    headers = {"Authorization": f"Bearer {KEY}"}
    # another process locks the database: the server's next write fails, unexpectedly
    blocker = sqlite3.connect(server.state_dir / "swarm.db", timeout=0)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        connection.request("POST", "/api/swarms", json.dumps(start_body()), headers)
        response = connection.getresponse()
        body = json.loads(response.read())
        sock = connection.sock
    finally:
        blocker.rollback()
        blocker.close()
    assert response.status == 500
    assert body["code"] == "internal_error" and "OperationalError" in body["detail"]
    connection.request("GET", "/healthz")
    again = connection.getresponse()
    assert again.status == 200 and json.loads(again.read())["status"] == "ok"
    assert connection.sock is sock  # the same connection answered
    connection.close()


# from inside a sandbox, with the key it is given

INSIDE = r"""
python3 - <<'EOF'
import json, os, socket, time
from urllib.parse import urlsplit
url = urlsplit(os.environ["MARITIME_API_URL"])
key = os.environ["MARITIME_API_KEY"]
def request(method, path, body=b"", headers=""):
    sock = socket.create_connection((url.hostname, url.port), timeout=20)
    head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"X-API-KEY: {key}\r\nContent-Length: {len(body)}\r\n{headers}\r\n")
    sock.sendall(head.encode() + body)
    status = sock.recv(65536).split(b" ")[1].decode()
    sock.close()
    return status
results = {
    "nul": request("POST", "/api/swarms", json.dumps(
        {"command": "true", "count": 1, "resultPath": "/tmp/a\0b"}).encode()),
    "deep": request("POST", "/api/swarms", b"[" * 100000 + b"]" * 100000),
    "name": request("POST", "/api/swarms", json.dumps(
        {"command": "true", "count": 1, "name": "n" * 1000000}).encode()),
    "limit": request("GET", "/v2/sandboxes?limit=abc"),
    "token": request("GET", "/v2/sandboxes?nextToken=abc"),
}
# a body declared far over the limit is refused before it is sent
sock = socket.create_connection((url.hostname, url.port), timeout=20)
sock.sendall(f"POST /api/swarms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
             f"Content-Length: {200 * 1024 * 1024}\r\n\r\n".encode())
results["huge"] = sock.recv(65536).split(b" ")[1].decode()
sock.close()
# many connections held open at once: a few get through, the rest are reset (once the
# connections above have been let go)
time.sleep(0.5)
held, answered, reset = [], 0, 0
for _ in range(24):
    try:
        sock = socket.create_connection((url.hostname, url.port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        if sock.recv(100).startswith(b"HTTP/1.1 200"):
            answered += 1
        else:
            reset += 1
        held.append(sock)
    except OSError:
        reset += 1
results["held"], results["reset"] = answered, reset
for sock in held:
    sock.close()
time.sleep(0.5)
results["after"] = request("GET", "/healthz")
print(json.dumps(results))
EOF
"""


def test_from_inside_a_sandbox_the_same_refusals_and_a_cap_on_connections(
    server: Server,
) -> None:
    sandbox = in_sandbox(server, INSIDE)
    assert sandbox["status"] == "succeeded", sandbox
    results = json.loads(str(sandbox["stdoutTail"]))
    assert results == {
        "nul": "400",
        "deep": "400",
        "name": "400",
        "limit": "400",
        "token": "400",
        "huge": "413",
        "held": 8,
        "reset": 16,
        "after": "200",
    }
    assert_whole(server)


# behind the edge: the engine


@pytest.mark.anyio
async def test_an_error_in_one_sandboxs_work_fails_that_sandbox_alone(
    local: tuple[Store, SandboxHost, SwarmServer],
) -> None:
    store, _, domain = local
    # past the edge's checks, as a bug would let a value through: the result is read with
    # a path no system call takes
    bad = start_body(count=2, resultPath="/tmp/a\0b")
    sandboxes = store.sandboxes(await run_to_completion(domain, bad))
    assert [(s.status, s.error) for s in sandboxes] == [
        ("failed", "internal error: ValueError: embedded null byte")
    ] * 2
    good = start_body(command="echo on")
    (sandbox,) = store.sandboxes(await run_to_completion(domain, good))
    assert (sandbox.status, sandbox.stdout_tail) == ("succeeded", "on\n")
    assert domain.stopped is None


def claimed_bases(state_dir: Path) -> tuple[Path, list[Path]]:
    """The claim file naming this state directory's base cgroups, and those bases."""
    name = base_cgroup_name(state_dir)
    for claim in _CLAIMS.iterdir():
        lines = claim.read_text().splitlines()
        if any(line.endswith("/" + name) for line in lines):
            return claim, [Path(line.split(" ", 1)[1]) for line in lines]
    raise AssertionError(f"no claim names {name}")


@pytest.mark.anyio
async def test_a_stopped_scheduler_is_reported_refuses_starts_and_still_cleans_up(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(state_dir))
    domain = assemble(store, host, Settings(2))
    app = create_app(domain, {KEY: frozenset({"read", "provision"})})
    claim, bases = claimed_bases(state_dir)
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {KEY}"}
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://x", headers=headers) as http,
        ):
            assert (await http.get("/healthz")).json()["status"] == "ok"
            store.close()  # the scheduler's next look at the store fails
            with anyio.fail_after(10):
                while domain.stopped is None:  # noqa: ASYNC110 (no event to await)
                    await anyio.sleep(0.05)
            health = await http.get("/healthz")
            assert health.status_code == 503
            assert health.json()["status"] == "stopped"
            assert "ProgrammingError" in health.json()["reason"]
            small = {"size": {"vcpus": 1, "memoryGb": 1}}
            for path, body in [("/api/swarms", start_body()), ("/v1/sandboxes", small)]:
                refused = await http.post(path, json=body)
                assert refused.status_code == 503
                assert refused.json()["code"] == "engine_stopped"
            assert all(base.exists() for base in bases)
        # the lifespan ended: the base cgroups and the claim on them are gone
        assert not claim.exists()
        assert not any(base.exists() for base in bases)
    finally:
        store.close()


def test_sigterm_after_refusals_leaves_no_cgroup_or_claim(tmp_path: Path) -> None:
    handle = start_server(tmp_path / "state", "--memory-gib", "2")
    try:
        claim, bases = claimed_bases(handle.state_dir)
        with handle.http() as http:
            assert http.post("/api/swarms", json=BAD_STARTS[0][1]).status_code == 400
        assert_whole(handle)
    finally:
        handle.kill(signal.SIGTERM)
    assert not claim.exists()
    wait_until(lambda: not any(base.exists() for base in bases), 10)


# the E2B surface


@pytest.fixture(scope="module")
def e2b_box(server: Server) -> Iterator[dict[str, str]]:
    """A live E2B sandbox: the headers its daemon's requests need."""
    with server.http() as http:
        created = http.post("/v2/sandboxes", json={"timeout": 600}, headers={"X-API-KEY": KEY})
        assert created.status_code == 201, created.text
        box = created.json()
        yield {"E2b-Sandbox-Id": box["sandboxID"], "X-Access-Token": box["envdAccessToken"]}
        http.delete(f"/sandboxes/{box['sandboxID']}", headers={"X-API-KEY": KEY})


def connect_call(
    http: httpx.Client, method: str, message: dict[str, Any], headers: dict[str, str]
) -> list[dict[str, Any]]:
    """A Connect streaming call (JSON): the messages of its answer, its end's error last."""
    data = json.dumps(message).encode()
    response = http.post(
        method,
        content=b"\0" + len(data).to_bytes(4, "big") + data,
        headers={**headers, "Content-Type": "application/connect+json"},
    )
    assert response.status_code == 200, response.text
    body, messages = response.content, []
    while body:
        size = int.from_bytes(body[1:5], "big")
        messages.append(json.loads(body[5 : 5 + size]))
        body = body[5 + size :]
    return messages


def run_in(
    http: httpx.Client, headers: dict[str, str], *argv: str, **config: Any
) -> dict[str, Any]:
    """Start a command in the E2B sandbox and follow it to its end; the end's event or error."""
    process = {"cmd": argv[0], "args": list(argv[1:]), **config}
    *events, end = connect_call(http, "/process.Process/Start", {"process": process}, headers)
    return end if end.get("error") else events[-1]


def test_e2b_list_parameters_are_checked_and_paging_ends(
    server: Server, e2b_box: dict[str, str]
) -> None:
    api = {"X-API-KEY": KEY}
    with server.http() as http:
        for query in (
            *("limit=abc", "limit=0", "limit=-1", "nextToken=abc", "nextToken=-1"),
            *("order=up", "state=frozen", "startedAfter=yesterday", "startedAfter=%00"),
        ):
            response = http.get(f"/v2/sandboxes?{query}", headers=api)
            assert response.status_code == 400, query
            assert query.split("=")[0] in response.json()["message"]
        other = http.post("/v2/sandboxes", json={}, headers=api).json()["sandboxID"]
        seen, token, pages = [], "", 0
        while pages < 5:
            page = http.get(f"/v2/sandboxes?limit=1&nextToken={token}", headers=api)
            seen += [box["sandboxID"] for box in page.json()]
            pages += 1
            token = page.headers.get("x-next-token", "")
            if not token:
                break
        http.delete(f"/sandboxes/{other}", headers=api)
    assert pages == 2 and sorted(seen) == sorted([e2b_box["E2b-Sandbox-Id"], other])
    assert page.json()[0]["diskSizeMB"] == 3 * 1024  # the disk each sandbox has here


def test_e2b_requests_the_domain_refuses_are_answered_in_e2bs_shape(
    server: Server, e2b_box: dict[str, str]
) -> None:
    # the domain's refusals, met through the E2B control plane: E2B's statuses and body,
    # never the Swarms API's shape, never a 500
    live = e2b_box["E2b-Sandbox-Id"]
    refused = [
        ("POST", "/v2/sandboxes", {"templateID": "desktop-linux"}, KEY, 404, "desktop-linux"),
        ("POST", "/v2/sandboxes", {"timeout": 0}, KEY, 400, "timeout"),
        ("POST", "/sandboxes", {"timeout": 10**6}, KEY, 400, "timeout"),
        ("POST", f"/sandboxes/{live}/timeout", {"timeout": 0}, KEY, 400, "timeout"),
        ("POST", f"/sandboxes/{live}/connect", {"timeout": -1}, KEY, 400, "timeout"),
        ("GET", f"/sandboxes/{live}", None, OTHER_KEY, 404, live),
        ("DELETE", f"/sandboxes/{live}", None, OTHER_KEY, 404, live),
        ("POST", f"/sandboxes/{live}/timeout", {"timeout": 5}, OTHER_KEY, 404, live),
        ("GET", f"/sandboxes/{live}/metrics", None, OTHER_KEY, 404, live),
        ("GET", f"/sandboxes/{live}/metrics?start=soon", None, KEY, 400, "start"),
        ("POST", "/v2/sandboxes/sbx-nothere/connect", {}, KEY, 404, "sbx-nothere"),
    ]
    with server.http() as http:
        for method, path, body, key, status, named in refused:
            answer = http.request(method, path, json=body, headers={"X-API-KEY": key})
            assert answer.status_code == status, (method, path, body, answer.text)
            assert answer.json().keys() == {"code", "message"}, answer.text
            assert answer.json()["code"] == status and named in answer.json()["message"]
        # the sandbox another account asked for is untouched
        assert http.get(f"/sandboxes/{live}", headers={"X-API-KEY": KEY}).status_code == 200
    assert server.health()["status"] == "ok"


def test_e2b_paths_this_server_lacks_are_e2bs_501_whatever_the_method_or_account(
    server: Server, e2b_box: dict[str, str]
) -> None:
    # a feature the server does not offer: E2B's body naming the call (the SDK shows it), not
    # the web framework's 404 or 405 (the SDK would take it for a missing sandbox, or fail
    # to read it), and never a way around the account check of what it does offer
    live = e2b_box["E2b-Sandbox-Id"]
    lacking = [
        ("POST", f"/sandboxes/{live}/refreshes"),
        ("GET", f"/sandboxes/{live}/logs"),
        ("PUT", f"/sandboxes/{live}/network"),
        ("GET", "/volumes"),
        ("GET", "/templates/base"),
        ("POST", "/v3/templates"),
        ("PATCH", "/sandboxes"),
    ]
    with server.http() as http:
        for method, path in lacking:
            for key in (KEY, OTHER_KEY):
                answer = http.request(method, path, json={}, headers={"X-API-KEY": key})
                assert answer.status_code == 501, (method, path, answer.text)
                assert answer.json() == {
                    "code": 501,
                    "message": f"{method} {path}: this swarm server does not offer it "
                    "(its E2B page lists what it offers)",
                }
        # what it offers still checks the account; the Swarms API keeps its own shape
        assert (
            http.delete(f"/sandboxes/{live}", headers={"X-API-KEY": OTHER_KEY}).status_code == 404
        )
        assert http.get(f"/sandboxes/{live}", headers={"X-API-KEY": KEY}).status_code == 200
        assert http.put("/api/swarms").json()["code"] == "method_not_allowed"


def test_e2b_paths_and_commands_no_system_call_takes_are_a_400_on_a_live_connection(
    server: Server, e2b_box: dict[str, str]
) -> None:
    host, port = address(server)
    connection = HTTPConnection(host, port, timeout=30)
    connection.request("GET", "/files?path=/tmp/a%00b", headers=e2b_box)
    response = connection.getresponse()
    assert response.status == 400 and b"NUL" in response.read()
    sock = connection.sock
    connection.request("POST", "/files?path=/tmp/" + "c" * 300, b"x", e2b_box)
    response = connection.getresponse()
    assert response.status == 400 and b"over the limit of 255 bytes" in response.read()
    assert connection.sock is sock
    connection.close()
    fs = {**e2b_box, "Content-Type": "application/json"}
    with server.http() as http:
        for method, message in [
            ("Stat", {"path": "/tmp/a\0b"}),
            ("ListDir", {"path": "/tmp/\x01"}),
            ("MakeDir", {"path": "/" + "d" * 5000}),
            ("Remove", {"path": "/tmp/a\0"}),
            ("Move", {"source": "/tmp", "destination": "/tmp/b\0"}),
        ]:
            answer = http.post(f"/filesystem.Filesystem/{method}", json=message, headers=fs)
            assert answer.status_code == 400, (method, answer.text)
            assert answer.json()["code"] == "invalid_argument"
        refusals = [
            run_in(http, e2b_box, "/bin/echo", "a\0b"),
            run_in(http, e2b_box, "/bin/e\0cho"),
            run_in(http, e2b_box, "/bin/echo", envs={"A=B": "x"}),
            run_in(http, e2b_box, "/bin/echo", envs={"A": "x\0"}),
            run_in(http, e2b_box, "/bin/echo", "x" * 1024 * 1024),
            run_in(http, e2b_box, "/bin/echo", cwd="/tmp/\0"),
        ]
        for refusal in refusals:
            assert refusal["error"]["code"] == "invalid_argument", refusal
        fields = [refusal["error"]["message"].split(":")[0] for refusal in refusals]
        assert fields == [
            "process.args.0",
            "process.cmd",
            "process.envs",
            "process.envs.A",
            "process",
            "process.cwd",
        ]
        # and the sandbox still runs commands
        assert run_in(http, e2b_box, "/bin/true")["event"]["end"]["status"] == "exit status 0"


def test_a_file_over_the_limit_is_neither_read_nor_written(
    server: Server, e2b_box: dict[str, str]
) -> None:
    with server.http() as http:
        # a sparse file costs the sandbox nothing, and would cost a server reading it whole
        # as much memory as it says it holds
        ended = run_in(http, e2b_box, "/usr/bin/truncate", "-s", "256M", "/tmp/big")
        assert ended["event"]["end"]["status"] == "exit status 0"
        before = rss_bytes(server)
        read = http.get("/files", params={"path": "/tmp/big"}, headers=e2b_box)
        assert read.status_code == 413 and "limit of 1048576 bytes" in read.json()["message"]
        assert rss_bytes(server) - before < 16 * MIB
        written = http.post(
            "/files", params={"path": "/tmp/up"}, content=b"x" * (2 * MIB), headers=e2b_box
        )
        assert written.status_code == 413 and written.json()["code"] == "body_too_large"
        small = http.post("/files", params={"path": "/tmp/up"}, content=b"y", headers=e2b_box)
        assert small.status_code == 200
        assert http.get("/files", params={"path": "/tmp/up"}, headers=e2b_box).content == b"y"


def test_a_listing_of_a_whole_tree_is_cut_short(server: Server, e2b_box: dict[str, str]) -> None:
    fs = {**e2b_box, "Content-Type": "application/json"}
    started = time.monotonic()
    with server.http() as http:
        answer = http.post(
            "/filesystem.Filesystem/ListDir",
            json={"path": "/usr", "depth": 100},
            headers={**fs, "Authorization": "Basic cm9vdDo="},
        )
    assert answer.status_code == 400, answer.text[:300]
    assert "more than 10000 entries" in answer.json()["message"]
    assert time.monotonic() - started < 10


def test_e2b_odd_but_valid_requests_are_answered_not_errors(
    server: Server, e2b_box: dict[str, str]
) -> None:
    fs = {**e2b_box, "Content-Type": "application/json"}
    with server.http() as http:
        # a null timeout is no timeout: the default (found by the fuzz)
        created = http.post("/v2/sandboxes", json={"timeout": None}, headers={"X-API-KEY": KEY})
        assert created.status_code == 201, created.text
        http.delete(f"/sandboxes/{created.json()['sandboxID']}", headers={"X-API-KEY": KEY})
        # a rename across mounts (/tmp and /dev/shm) is the request's error, not the server's
        made = http.post("/filesystem.Filesystem/MakeDir", json={"path": "/tmp/m"}, headers=fs)
        assert made.status_code == 200, made.text
        moved = http.post(
            "/filesystem.Filesystem/Move",
            json={"source": "/tmp/m", "destination": "/dev/shm/m"},
            headers=fs,
        )
        assert moved.status_code == 400, moved.text
        assert "cross-device" in moved.json()["message"].lower()
        # a body that is not the call's message is the request's error too
        for body in (b"", b"{", b"[" * 5000, b'{"path": 5}'):
            stat = http.post("/filesystem.Filesystem/Stat", content=body, headers=fs)
            assert stat.status_code == 400, (body, stat.text)
            assert stat.json()["code"] == "invalid_argument"
