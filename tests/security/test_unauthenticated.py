"""Attacks from outside with no key: connections held open by bodies that trickle in, bodies
sent to be refused, and many connections from one address.

Each must cost the server little: a request without a key is answered before any of its body
is read and its connection closed, a body that comes too slowly is answered 408 however
steadily it trickles, and one address holds only so many connections.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import InvalidStatus

from ..servers import KEY, Server, point_e2b_at
from .conftest import in_sandbox, served
from .test_edge import address

RATE_KIB = 1
"""The servers' slowest body rate, in KiB a second."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with a short read timeout and a slow minimum rate, so a body that trickles
    in is cut off within seconds."""
    options = ("--memory-gib", "4", "--read-timeout", "3", "--min-body-rate", str(RATE_KIB))
    yield from served(tmp_path_factory, "unauthenticated", *options)


def connect(server: Server, source: str = "127.0.0.1") -> socket.socket:
    """A connection to the server from `source` (any address of 127.0.0.0/8 reaches it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(30)  # a safety net: every answer below comes long before
    sock.bind((source, 0))
    sock.connect(address(server))
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    answer = b""
    with contextlib.suppress(ConnectionResetError):
        while part := sock.recv(65536):
            answer += part
    return answer


def head(answer: bytes) -> tuple[int, dict[str, str]]:
    """The status and headers of an HTTP answer."""
    lines = answer.split(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers


CONNECT = "Content-Length: 100000\r\nContent-Type: application/json"
SANDBOX = "E2b-Sandbox-Id: sbx-made-up\r\nX-Access-Token: guessed"
REFUSED = [
    ("POST /api/swarms", "Transfer-Encoding: chunked", b"5\r\nxxxxx\r\n", 401, "unauthorized"),
    (
        "POST /api/swarms",
        "Content-Length: 100000\r\nAuthorization: Bearer x",
        b"{",
        401,
        "unauthorized",
    ),
    ("POST /v2/sandboxes", "Content-Length: 100000", b"{", 401, 401),
    ("POST /filesystem.Filesystem/Stat", CONNECT, b'{"path"', 400, "invalid_argument"),
    ("POST /filesystem.Filesystem/Stat", f"{CONNECT}\r\n{SANDBOX}", b"{", 502, "unavailable"),
    ("POST /process.Process/Start", f"{CONNECT}\r\n{SANDBOX}", b"{", 502, "unavailable"),
    ("POST /files?path=/x", "Content-Length: 100000", b"xxxxx", 400, 400),
    ("POST /files?path=/x", f"Content-Length: 100000\r\n{SANDBOX}", b"xxxxx", 502, 502),
]


@pytest.mark.parametrize(
    ("request_line", "framing", "start", "status", "code"),
    REFUSED,
    ids=[f"{r[0]} {r[3]}" for r in REFUSED],
)
def test_a_request_without_a_key_is_refused_before_its_body_and_its_connection_closed(
    server: Server, request_line: str, framing: str, start: bytes, status: int, code: str | int
) -> None:
    with connect(server) as sock:
        sock.sendall(f"{request_line} HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode() + start)
        # the rest of the body never comes: the answer must not wait for it
        answer = read_until_closed(sock)
    assert head(answer)[0] == status, answer[:300]
    assert head(answer)[1]["connection"] == "close"
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["code"] == code
    assert server.health()["status"] == "ok"


def test_a_body_that_trickles_in_steadily_is_cut_off_at_its_deadline(server: Server) -> None:
    # one byte every 0.2 s never pauses for the read timeout; at 5 bytes a second it comes
    # far slower than the minimum rate, so its deadline (3 s and 4 s for its 4,096 bytes)
    # cuts it off
    size = 4 * 1024
    with connect(server) as sock:
        sock.sendall(
            f"POST /api/swarms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Length: {size}\r\n\r\n".encode()
        )
        answered = False
        for _ in range(size):  # the whole body's worth: a safety net, never reached
            try:
                sock.sendall(b" ")
            except OSError:
                break  # closed once answered
            sock.settimeout(0.2)
            try:
                if sock.recv(1, socket.MSG_PEEK):
                    answered = True
                    break
            except TimeoutError:
                continue
        assert answered
        sock.settimeout(30)
        answer = read_until_closed(sock)
    status, headers = head(answer)
    assert status == 408, answer[:300]
    assert headers["connection"] == "close"
    detail = json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"]
    assert f"slower than {RATE_KIB * 1024} bytes a second" in detail


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose client addresses may hold 4 connections each, sandboxes 8."""
    options = ("--max-client-connections", "4", "--max-sandbox-connections", "8")
    yield from served(tmp_path_factory, "capped", "--memory-gib", "4", *options)


def healthz(sock: socket.socket) -> int:
    """The status of `GET /healthz` on a connection, 0 if it was reset or closed."""
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = sock.recv(65536)
    except OSError:
        return 0
    return head(answer)[0] if answer else 0


def test_one_address_holds_only_so_many_connections(capped: Server) -> None:
    held = [connect(capped, "127.0.0.2") for _ in range(4)]
    for sock in held:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # a head begun, never ended
    with connect(capped, "127.0.0.2") as extra:
        assert healthz(extra) == 0  # reset at once
    with connect(capped, "127.0.0.3") as other:
        assert healthz(other) == 200  # another address is served
    held.pop().close()
    served_again(capped, "127.0.0.2")
    for sock in held:
        sock.close()


def served_again(server: Server, source: str) -> None:
    """Wait until `source` is served again, as the server counts a closed connection out
    once it sees it closed (the deadline only a safety net)."""
    deadline = time.monotonic() + 30
    while True:
        with connect(server, source) as again:
            if healthz(again) == 200:
                return
        assert time.monotonic() < deadline


HOLD_EIGHT = r"""
python3 - <<'EOF'
import os, socket
from urllib.parse import urlsplit
url = urlsplit(os.environ["MARITIME_API_URL"])
held = []
for _ in range(8):
    sock = socket.create_connection((url.hostname, url.port), timeout=20)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    held.append(sock.recv(100).startswith(b"HTTP/1.1 200"))
print(sum(held))
EOF
"""


def test_a_sandboxs_connections_count_against_its_own_cap_not_its_address(
    capped: Server,
) -> None:
    # every sandbox reaches the server from this machine's address, through the server's
    # forwarder: they are capped per sandbox instead
    assert in_sandbox(capped, HOLD_EIGHT)["stdoutTail"] == "8\n"  # all answered


# the gate: what a request head without a key is answered before the application runs

UNKNOWN = "Authorization: Bearer made-up"
DOORS = [
    ("POST /api/swarms", ""),
    ("POST /api/swarms", UNKNOWN),
    ("POST /api/swarms", "Authorization: Basic eDp5"),
    ("GET /v1/sandboxes/sbx-made-up", UNKNOWN),
    ("GET /admin/accounts", ""),
    ("POST /v2/sandboxes", ""),
    ("POST /v2/sandboxes", "X-API-KEY: made-up"),
    ("GET /snapshots", UNKNOWN),
    ("GET /health", ""),
    ("POST /files?path=/x", ""),
    ("GET /files", ""),
    ("POST /filesystem.Filesystem/Stat", ""),
]


def answered(server: Server, head: bytes, pieces: int = 1) -> bytes:
    """The answer to a request head sent in `pieces` parts, once the connection closes."""
    with connect(server) as sock:
        step = -(-len(head) // pieces)
        for start in range(0, len(head), step):
            sock.sendall(head[start : start + step])
            time.sleep(0.01 if pieces > 1 else 0)  # each part its own segment, as a rule
        return read_until_closed(sock)


def escaped(request_line: str) -> str:
    """The request line with its path's last letter %-escaped: the same route, but a path
    the gate does not read, so the route answers."""
    method, target = request_line.split(" ")
    path, mark, query = target.partition("?")
    return f"{method} {path[:-1]}%{ord(path[-1]):02X}{mark}{query}"


@pytest.mark.parametrize(
    ("request_line", "credential"), DOORS, ids=[f"{d[0]} {d[1]}".strip() for d in DOORS]
)
def test_a_request_without_a_known_key_is_answered_as_the_route_would_answer_it(
    server: Server, request_line: str, credential: str
) -> None:
    # whether the head came at once or in pieces, the gate's answer is the route's own
    framing = f"Host: x\r\n{credential}\r\n" if credential else "Host: x\r\n"
    framing += "Content-Length: 100000\r\nContent-Type: application/json"
    by_route = answered(server, f"{escaped(request_line)} HTTP/1.1\r\n{framing}\r\n\r\n".encode())
    assert head(by_route)[0] in (400, 401), by_route[:300]
    for pieces in (1, 7):
        by_gate = answered(server, f"{request_line} HTTP/1.1\r\n{framing}\r\n\r\n".encode(), pieces)
        assert head(by_gate)[0] == head(by_route)[0], by_gate[:300]
        assert head(by_gate)[1]["connection"] == "close"
        assert head(by_gate)[1]["content-type"] == head(by_route)[1]["content-type"]
        assert by_gate.split(b"\r\n\r\n", 1)[1] == by_route.split(b"\r\n\r\n", 1)[1]
    assert server.health()["status"] == "ok"


def test_a_head_without_a_host_is_refused_as_malformed_not_as_unauthenticated(
    server: Server,
) -> None:
    # HTTP/1.1 needs a Host: h11's 400, as with a key, not the gate's 401
    status, _ = head(answered(server, b"POST /api/swarms HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"))
    assert status == 400


def test_a_request_for_a_sandboxs_port_passes_the_gate_to_the_sandbox(server: Server) -> None:
    # its path is the sandbox's, not this server's: the port's refusal (no such sandbox), not
    # the gate's
    request = (
        b"POST /api/swarms HTTP/1.1\r\nHost: 8000-sbx-made-up.x\r\nContent-Length: 2\r\n\r\n{}"
    )
    status, _ = head(answered(server, request))
    assert status == 502


def test_the_consoles_paths_are_not_the_apis(server: Server) -> None:
    # the console's port has a path of the E2B control plane's; its own answer, never the
    # gate's
    ready = json.loads(server.state_dir.with_suffix(".ready").read_text())
    console = urlsplit(ready["consoleUrl"])
    assert console.hostname is not None and console.port is not None
    with socket.create_connection((console.hostname, console.port), timeout=30) as sock:
        sock.sendall(b"GET /sandboxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = read_until_closed(sock)
    assert head(answer)[0] != 401, answer[:300]


HOLD_WEBSOCKETS = """\
import base64, hashlib, socket, sys
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
held = []
while True:
    conn, _ = server.accept()
    request = b""
    while b"\\r\\n\\r\\n" not in request:
        request += conn.recv(4096)
    (key,) = [line.split(b":", 1)[1].strip() for line in request.split(b"\\r\\n")
              if line.lower().startswith(b"sec-websocket-key:")]
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\n"
                 b"Connection: Upgrade\\r\\nSec-WebSocket-Accept: " + accept + b"\\r\\n\\r\\n")
    held.append(conn)
"""
"""A sandbox's server of WebSockets that holds every one it takes, saying nothing."""


def test_a_websocket_counts_against_its_address_until_it_closes(
    capped: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    e2b = pytest.importorskip("e2b")
    client = pytest.importorskip("websockets.sync.client")
    point_e2b_at(capped, monkeypatch)
    sandbox = e2b.Sandbox.create()
    try:
        sandbox.files.write("ws.py", HOLD_WEBSOCKETS)
        sandbox.commands.run("python3 ws.py 8000", background=True)
        uri = f"ws://{sandbox.get_host(8000)}/"

        def websocket(source: str) -> Any:
            return client.connect(uri, sock=connect(capped, source), open_timeout=30)

        deadline = time.monotonic() + 60
        while True:  # until the sandbox's server listens (from another address)
            try:
                websocket("127.0.0.3").close()
                break
            except InvalidStatus as ex:
                assert ex.response.status_code == 502 and time.monotonic() < deadline
                time.sleep(0.1)
        held = [websocket("127.0.0.2") for _ in range(4)]
        with connect(capped, "127.0.0.2") as extra:
            assert healthz(extra) == 0  # the address holds 4 upgraded connections
        held.pop().close()
        served_again(capped, "127.0.0.2")
        for ws in held:
            ws.close()
    finally:
        sandbox.kill()
