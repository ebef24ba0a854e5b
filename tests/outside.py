"""A stand-in for the internet, for tests of sandboxes' way out: a network namespace for the
server under test (with only `lo` up), joined by a veth pair to a second namespace (the
"internet") where HTTP servers answer on `OUTSIDE`, `ELSEWHERE` and `METADATA`, a listener
with a long backlog on `FLOOD_PORT`, a UDP port whose datagrams are logged with their
source address, and web servers on ports 80 (HTTP) and 443 (TLS, a certificate of its own)
that answer with the `Host` they were sent.

Nothing leaves these two namespaces, which go when the test is done. The test's threads stay
in the namespace they are in: a thread enters the server's only for a while (`inside`), to
start a server or look at its rules, and clients reach a server there through a relay on
this namespace's loopback (`relay`). A thread left in the server's namespace would take the
processes it starts, and the threads it makes (an HTTP client's pool), there for good.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .servers import Server, environment_args, start_server

_CLONE_NEWNET = 0x40000000
needs_nftables = pytest.mark.skipif(
    shutil.which("nft") is None, reason="sandboxes' way out needs nft (scripts/setup installs it)"
)
OUTSIDE = "198.51.100.1"
"""An outside host, as sandboxes reach it."""
ELSEWHERE = "198.51.100.3"
"""Another outside host."""
SERVER_SIDE = "198.51.100.2"
"""The server namespace's own address towards the internet (the host's other address)."""
METADATA = "169.254.169.254"
"""A cloud metadata service, on the far side and routed to from the server's namespace."""
HTTP_PORT = 8080
FLOOD_PORT = 9100
"""Takes every connection (a backlog of 4096) and never answers."""
UDP_PORT = 9200
WEB_PORT = 80
TLS_PORT = 443
_FAR_SIDE = """\
import http.server, socket, ssl, sys, threading
log = open(sys.argv[1], "a", buffering=1)
http_port, flood_port, udp_port = map(int, sys.argv[2:5])
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("host=" + (self.headers.get("Host") or "")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
web = http.server.ThreadingHTTPServer(("0.0.0.0", 80), Echo)
secure = http.server.ThreadingHTTPServer(("0.0.0.0", 443), Echo)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[5], sys.argv[6])
secure.socket = context.wrap_socket(secure.socket, server_side=True)
for served in (web, secure):
    threading.Thread(target=served.serve_forever, daemon=True).start()
flood = socket.create_server(("0.0.0.0", flood_port), backlog=4096)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("0.0.0.0", udp_port))
def record():
    while True:
        data, (source, _) = udp.recvfrom(2048)
        log.write(f"{source} {data.decode(errors='replace')}\\n")
threading.Thread(target=record, daemon=True).start()
handler = http.server.SimpleHTTPRequestHandler
http.server.ThreadingHTTPServer(("0.0.0.0", http_port), handler).serve_forever()
"""


@dataclass(frozen=True)
class Internet:
    """The stand-in internet, and the server's namespace joined to it."""

    server_ns: int
    """The server's network namespace, open."""
    namespace: str
    """Its name (as `/proc/thread-self/ns/net` links to it)."""
    udp_log: Path
    """What `UDP_PORT` received: a line `SOURCE PAYLOAD` a datagram."""

    def datagrams(self) -> list[str]:
        return self.udp_log.read_text().splitlines()

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        """This thread in the server's namespace, for the while."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(self.server_ns)
            yield
        finally:
            _setns(home)
            os.close(home)

    def run(self, *argv: str) -> str:
        """The output of `argv` run in the server's namespace."""
        with self.inside():
            return subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    def start_server(self, state_dir: Path, *extra: str) -> Server:
        """A server in the server's namespace (its `url` a relay to it, on this loopback)."""
        with self.inside():
            handle = start_server(state_dir, *environment_args(), *extra)
        return dataclasses.replace(handle, url=self._relay(int(handle.url.rsplit(":", 1)[1])))

    def _relay(self, port: int) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, args=(listener, port), daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    def _accept(self, listener: socket.socket, port: int) -> None:
        _setns(self.server_ns)  # this thread's connections are to the server's loopback
        while True:
            client, _ = listener.accept()
            server = socket.create_connection(("127.0.0.1", port))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET) failed")


def _unshare() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed: these tests need root")


def _reachable(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def internet(log_dir: Path) -> Iterator[Internet]:
    """A new network namespace for a server, joined to a stand-in internet (its UDP log in
    `log_dir`)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    processes: list[subprocess.Popen[bytes]] = []
    server_ns = -1
    try:
        _unshare()
        server_ns = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        far = subprocess.Popen(["unshare", "-n", "sleep", "infinity"])
        processes.append(far)
        ours = os.readlink("/proc/thread-self/ns/net")
        for _ in range(200):  # until `unshare` has made its namespace
            if os.readlink(f"/proc/{far.pid}/ns/net") != ours:
                break
            time.sleep(0.01)
        inside = ["nsenter", "-t", str(far.pid), "-n"]
        setup = (
            f"ip link set lo up && ip addr add {OUTSIDE}/24 dev eth0 && "
            f"ip addr add {ELSEWHERE}/24 dev eth0 && ip addr add {METADATA}/32 dev eth0 && "
            "ip link set eth0 up"
        )
        for argv in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "link", "add", "inet0", "type", "veth", "peer", "name", "eth0", "netns",
             f"/proc/{far.pid}/ns/net"],
            ["ip", "addr", "add", f"{SERVER_SIDE}/24", "dev", "inet0"],
            ["ip", "link", "set", "inet0", "up"],
            ["ip", "route", "add", f"{METADATA}/32", "dev", "inet0"],
            [*inside, "sh", "-c", setup],
        ):  # fmt: skip
            subprocess.run(argv, check=True)
        udp_log = log_dir / "udp.log"
        udp_log.touch()
        ports = (str(port) for port in (HTTP_PORT, FLOOD_PORT, UDP_PORT))
        certificate, key = log_dir / "web.pem", log_dir / "web.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "2", "-subj", "/CN=outside.test", "-keyout", str(key),
             "-out", str(certificate)],
            check=True, capture_output=True,
        )  # fmt: skip
        far_side = [
            sys.executable,
            "-c",
            _FAR_SIDE,
            str(udp_log),
            *ports,
            str(certificate),
            str(key),
        ]
        processes.append(
            subprocess.Popen(
                [*inside, *far_side], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        for _ in range(600):
            if all(_reachable(OUTSIDE, port) for port in (HTTP_PORT, WEB_PORT, TLS_PORT)):
                break
            time.sleep(0.05)
        _setns(home)
        yield Internet(server_ns, ours, udp_log)
    finally:
        _setns(home)
        os.close(home)
        for process in reversed(processes):
            process.kill()
            process.wait()
        if server_ns >= 0:
            os.close(server_ns)


REACH = (
    "import socket, sys\n"
    "try:\n"
    "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)\n"
    "    s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n"
    "    print(s.recv(12).decode())\n"
    "except OSError as ex:\n"
    "    print('unreachable', type(ex).__name__)\n"
)
"""A program a sandbox runs (`python3 -c REACH ADDRESS PORT`): it prints the start of the HTTP
answer of ADDRESS:PORT, or `unreachable` and why."""

NAMED = r"""
import socket, ssl, sys
address, port, mode, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
request = f"GET / HTTP/1.0\r\nHost: {name}\r\n\r\n".encode()
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
try:
    s = socket.create_connection((address, port), timeout=60)
except OSError as ex:
    sys.exit(print("unreachable", type(ex).__name__))
try:
    if mode == "tls":
        s = context.wrap_socket(s, server_hostname=name)
    elif mode == "hello":  # a TLS ClientHello naming `name`, sent as it is
        outgoing = ssl.MemoryBIO()
        tls = context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=name)
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            request = outgoing.read()
    s.sendall(request)
    answer = b""
    while chunk := s.recv(4096):
        answer += chunk
    print(answer.split(b"\r\n\r\n", 1)[-1].decode(errors="replace") or "closed")
except OSError:
    print("closed")
"""
"""A program a sandbox runs (`python3 -c NAMED ADDRESS PORT MODE NAME`): it sends ADDRESS:PORT
a GET naming host NAME, over TLS with NAME as its server name (MODE `tls`) or not (`http`), or
only a ClientHello naming it (`hello`), and prints what the answer holds (the far side's
`host=NAME`), `closed` when the connection closed without one, or `unreachable` and why."""
