"""Ports (`get_host`) with the unmodified e2b SDK: a server started inside a sandbox answers
requests sent to the swarm server with the `Host` the SDK names, on each engine (on Ray, the
sandbox's node relays the connection)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest
from e2b import AsyncSandbox, Sandbox
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from ....servers import Server

pytestmark = pytest.mark.usefixtures("e2b_env")

PORT = 8000
ECHO = """\
import http.server, json, sys

class Echo(http.server.BaseHTTPRequestHandler):
    def answer(self):
        size = int(self.headers.get("content-length") or 0)
        body = json.dumps({
            "method": self.command,
            "path": self.path,
            "body": self.rfile.read(size).decode(),
            "token": self.headers.get("e2b-traffic-access-token"),
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Echo).serve_forever()
"""


def _through(server: Server, host: str, token: str | None = None) -> httpx.Client:
    """A client of the swarm server that names `host`, as a resolver of it would."""
    headers = {"host": host} | ({"e2b-traffic-access-token": token} if token else {})
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def _wait_listening(client: httpx.Client) -> None:
    """Wait for the sandbox's server to listen (the deadline only a safety net)."""
    deadline = time.monotonic() + 60
    while (answer := client.get("/")).status_code == 502 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert answer.status_code == 200, answer.text


@pytest.fixture
def echo() -> Iterator[Sandbox]:
    """A sandbox serving ECHO on PORT."""
    sbx = Sandbox.create()
    try:
        sbx.files.write("echo.py", ECHO)
        # held: a background command ends when its handle lets go
        handle = sbx.commands.run(f"python3 echo.py {PORT}", background=True)
        yield sbx
        handle.kill()
    finally:
        sbx.kill()


def test_a_port_is_reached_at_the_host_the_sdk_names(echo: Sandbox, server: Server) -> None:
    assert echo.traffic_access_token is None  # open, as E2B's are by default
    host = echo.get_host(PORT)
    assert host.startswith(f"{PORT}-{echo.sandbox_id}.")
    with _through(server, host) as client:
        _wait_listening(client)
        got = client.post("/a/b?c=1", content=b"x" * 100_000)
        assert got.status_code == 200
        assert got.json() == {
            "method": "POST",
            "path": "/a/b?c=1",
            "body": "x" * 100_000,
            "token": None,
        }
        # a port nothing listens on, of the same sandbox
        closed = _through(server, echo.get_host(PORT + 1)).get("/")
        assert closed.status_code == 502
        assert f"nothing listens on port {PORT + 1}" in closed.json()["message"]


def test_a_paused_sandboxs_port_is_refused_until_it_resumes(echo: Sandbox, server: Server) -> None:
    with _through(server, echo.get_host(PORT)) as client:
        _wait_listening(client)  # and a connection kept idle for the next request
        echo.pause()
        paused = client.get("/")
        assert paused.status_code == 502
        assert f"sandbox {echo.sandbox_id} is paused" in paused.json()["message"]
        Sandbox.connect(echo.sandbox_id)
        assert client.get("/").status_code == 200


def test_a_port_of_another_sandbox_is_that_sandboxs_own(echo: Sandbox, server: Server) -> None:
    other = Sandbox.create()
    try:
        with _through(server, echo.get_host(PORT)) as client:
            _wait_listening(client)
        # the same port number, in a sandbox where nothing listens on it
        assert _through(server, other.get_host(PORT)).get("/").status_code == 502
    finally:
        other.kill()
    gone = _through(server, other.get_host(PORT)).get("/")
    assert (gone.status_code, gone.json()["code"]) == (502, 502)
    assert "not found" in gone.json()["message"]


def test_private_ports_take_only_the_traffic_token(server: Server) -> None:
    sbx = Sandbox.create(network={"allow_public_traffic": False})
    try:
        token = sbx.traffic_access_token
        assert token
        sbx.files.write("echo.py", ECHO)
        handle = sbx.commands.run(f"python3 echo.py {PORT}", background=True)
        with _through(server, sbx.get_host(PORT), token) as client:
            _wait_listening(client)
            # the token is the server's check, not passed on to the sandbox
            assert client.get("/").json()["token"] is None
        for wrong in (None, token[:-1], "x" * len(token)):
            refused = _through(server, sbx.get_host(PORT), wrong).get("/")
            assert refused.status_code == 403
            assert "e2b-traffic-access-token" in refused.json()["message"]
        handle.kill()
    finally:
        sbx.kill()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_a_port_with_the_async_sdk(anyio_backend: str, server: Server) -> None:
    sbx = await AsyncSandbox.create()
    try:
        await sbx.files.write("echo.py", ECHO)
        handle = await sbx.commands.run(f"python3 echo.py {PORT}", background=True)
        headers = {"host": sbx.get_host(PORT)}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as client:
            deadline = time.monotonic() + 60
            while (got := await client.get("/x")).status_code == 502:
                assert time.monotonic() < deadline, got.text
                await anyio.sleep(0.1)
            assert got.json()["path"] == "/x"
        await handle.kill()
    finally:
        await sbx.kill()


WS_ECHO = """\
import sys
from websockets.sync.server import serve

def echo(socket):
    for message in socket:
        socket.send(message)
        socket.send(b"bin:" + (message.encode() if isinstance(message, str) else message))

with serve(echo, "127.0.0.1", int(sys.argv[1])) as server:
    server.serve_forever()
"""


def test_a_websocket_is_forwarded_both_ways(server: Server) -> None:
    sbx = Sandbox.create()
    try:
        sbx.files.write("ws.py", WS_ECHO)
        # the test run's interpreter, which has websockets (its environment is shared, and
        # readable by root only here)
        command = f"{sys.executable} /home/user/ws.py {PORT}"
        handle = sbx.commands.run(command, background=True, user="root")
        host = sbx.get_host(PORT)
        address = server.url.removeprefix("http://").rsplit(":", 1)
        deadline = time.monotonic() + 60
        while True:
            # the name resolves nowhere: connect to the server, and name the host in the URI
            sock = socket.create_connection((address[0], int(address[1])))
            try:
                ws = connect(f"ws://{host}/chat", sock=sock, open_timeout=30)
                break
            except InvalidStatus as ex:
                sock.close()
                assert ex.response.status_code == 502 and time.monotonic() < deadline
                time.sleep(0.1)
        with ws:
            ws.send("hello")
            assert ws.recv(timeout=30) == "hello"
            assert ws.recv(timeout=30) == b"bin:hello"
            big = bytes(range(256)) * 2048  # 512 KiB, over many of the relay's reads
            ws.send(big)
            assert ws.recv(timeout=30) == big
            assert ws.recv(timeout=30) == b"bin:" + big
        handle.kill()
    finally:
        sbx.kill()


def test_a_websocket_to_a_closed_port_is_refused_with_the_reason(
    echo: Sandbox, server: Server
) -> None:
    address = server.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((address[0], int(address[1])))
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://{echo.get_host(PORT + 1)}/", sock=sock, open_timeout=30)
    assert refused.value.response.status_code == 502
    assert b"nothing listens" in refused.value.response.body
