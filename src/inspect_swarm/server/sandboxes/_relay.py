"""Filtering a sandbox's web traffic by host name (`--network nat`, allow lists that name hosts).

The server's rules redirect such a sandbox's TCP connections to ports 80 and 443 to this
relay, in the server's network namespace. For each, the relay reads the start of what the
sandbox sends: on port 80 the HTTP request's `Host` header, on port 443 the TLS ClientHello's
server name (SNI); the other protocol on either port carries no name. If the name is on the
sandbox's list, or its allow list holds the destination's address (or its deny list does not),
the relay connects to the connection's original destination (SO_ORIGINAL_DST), never to where
the name points, sends on what it read and passes bytes both ways. Otherwise it closes the
connection, which the sandbox saw accepted.

Bounds: at most `CONNECTIONS` connections of one sandbox at once (one more is closed at once),
`HEAD_BYTES` read before a decision, which must come within `HEAD_SECONDS`, and
`CONNECT_SECONDS` to reach the destination. The relay's own connections carry `MARK`, by which
the server's rules refuse them what no sandbox reaches (the host's own addresses, other
sandboxes, loopback, link-local and reserved addresses).

An asyncio loop on a thread of its own serves every sandbox's connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
import threading
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from ._ports import entered

HTTP_PORT = 80
TLS_PORT = 443
HEAD_BYTES = 16389
"""What the relay reads of a connection at most before it decides: a whole TLS record (16 KiB
and its 5-byte header), or an HTTP request's headers."""
HEAD_SECONDS = 10.0
"""How long a connection has to send what the relay decides on."""
CONNECT_SECONDS = 10.0
"""How long the relay waits for a connection to the original destination."""
MARK = 0x53570000
"""The firewall mark of the relay's own connections."""
_CHUNK = 65536
_SO_ORIGINAL_DST = 80
_TLS_HANDSHAKE = 22
_CLIENT_HELLO = 1
_SERVER_NAME = 0


@dataclass(frozen=True)
class Admission:
    """Where one sandbox's redirected connections may go."""

    address: str
    """The sandbox's own address: its connections come from it and nothing else."""
    allow: tuple[IPv4Network, ...]
    deny: tuple[IPv4Network, ...]
    names: tuple[str, ...]
    """Host names, and `*.` wildcards for the names below one."""

    def permits(self, destination: str, name: str | None) -> bool:
        """Whether a connection to `destination` that names `name` (None: no name) passes."""
        address = IPv4Address(destination)
        if any(address in network for network in self.allow):
            return True
        if name is not None and any(matches(name, pattern) for pattern in self.names):
            return True
        return not any(address in network for network in self.deny)


def matches(name: str, pattern: str) -> bool:
    """Whether the host name `name` is `pattern`, or below it when `pattern` is `*.` and a name."""
    name = name.lower().removesuffix(".")
    if pattern.startswith("*."):
        return name.endswith(pattern[1:])
    return name == pattern


def requested_name(head: bytes, port: int) -> str | None:
    """The host name `head`, the start of a connection to `port`, asks for; None when more
    bytes are needed (ValueError when it names no host, or not within `HEAD_BYTES`)."""
    if port == TLS_PORT:
        name = _server_name(head)
    elif port == HTTP_PORT:
        name = _host_header(head)
    else:
        raise ValueError(f"port {port} is not filtered by name")
    if name is None and len(head) >= HEAD_BYTES:
        raise ValueError("no name within the bytes read before a decision")
    return name


def _host_header(head: bytes) -> str | None:
    if not head[:1].isalpha():  # a request starts with its method's name
        raise ValueError("not an HTTP request")
    end = head.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = head[:end].split(b"\r\n")[1:]
    hosts = [line.split(b":", 1)[1] for line in lines if line.lower().startswith(b"host:")]
    if len(hosts) != 1:
        raise ValueError("an HTTP request names its host once, in one Host header")
    host = hosts[0].strip().decode("ascii")  # UnicodeDecodeError is a ValueError
    if host.startswith("["):
        raise ValueError("an IPv6 host names no host")
    return host.rsplit(":", 1)[0] if ":" in host else host


def _server_name(head: bytes) -> str | None:
    """The server name of the ClientHello in the TLS record `head` starts with."""
    if len(head) < 5:
        return None
    kind, _, length = struct.unpack("!BHH", head[:5])
    if kind != _TLS_HANDSHAKE or length > HEAD_BYTES - 5:
        raise ValueError("not a TLS handshake")
    if len(head) < 5 + length:
        return None
    try:
        return _hello_server_name(memoryview(head)[5 : 5 + length])
    except (IndexError, struct.error):
        raise ValueError("a ClientHello cut short") from None


def _hello_server_name(hello: memoryview) -> str:
    length = len(hello)
    if hello[0] != _CLIENT_HELLO or int.from_bytes(hello[1:4]) > length - 4:
        raise ValueError("not a ClientHello in one record")
    at = 4 + 2 + 32  # its header, version and random
    at += 1 + hello[at]  # session id
    at += 2 + int.from_bytes(hello[at : at + 2])  # cipher suites
    at += 1 + hello[at]  # compression methods
    end = at + 2 + int.from_bytes(hello[at : at + 2])
    at += 2
    while at + 4 <= end:
        kind, size = struct.unpack("!HH", hello[at : at + 4])
        if kind == _SERVER_NAME:
            return _first_host(hello[at + 4 : at + 4 + size])
        at += 4 + size
    raise ValueError("a ClientHello without a server name")


def _first_host(extension: memoryview) -> str:
    # a list's length (2 bytes), then entries: a kind (0: a host name), a length, the name
    if len(extension) < 5 or extension[2] != 0:
        raise ValueError("a server name that is no host name")
    size = int.from_bytes(extension[3:5])
    return bytes(extension[5 : 5 + size]).decode("ascii")


class Relay:
    """Passes the redirected connections of sandboxes whose lists name hosts on, or closes
    them; serves on `port` of every address of the namespace open as `home`."""

    def __init__(self, home: int, limit: int) -> None:
        self._home = home
        self._limit = limit
        self._admissions: dict[str, Admission] = {}
        """By the address the sandbox's connections arrive at (the server's end of its pair)."""
        self._lock = threading.Lock()
        self._open: dict[str, set[asyncio.Task[None]]] = {}
        """The connections of each sandbox being served (touched on the loop only)."""
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> None:
        """Listen, and serve on a thread of the relay's own (OSError when it cannot listen)."""
        listener = self._listen()
        self.port = listener.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(listener, ready), name="relay", daemon=True
        )
        self._thread.start()
        ready.wait()

    def admit(self, arrival: str, admission: Admission) -> None:
        """Serve the connections that arrive at the address `arrival` under `admission`."""
        with self._lock:
            self._admissions[arrival] = admission

    def drop(self, arrival: str) -> None:
        """Stop serving connections arriving at `arrival`, and cut those being served."""
        with self._lock:
            self._admissions.pop(arrival, None)
        if not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self._loop.call_soon_threadsafe(self._cut, arrival)

    def close(self) -> None:
        """Cut every connection and stop serving."""
        if self._thread is None:  # never started
            self._loop.close()
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._thread = None

    def _listen(self) -> socket.socket:
        with entered(self._home):
            return socket.create_server(("0.0.0.0", 0), backlog=1024)

    def _serve(self, listener: socket.socket, ready: threading.Event) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(self._take, sock=listener))
        ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    def _cut(self, arrival: str) -> None:
        for task in self._open.pop(arrival, set()):
            task.cancel()

    async def _take(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        arrival, peer = writer.get_extra_info("sockname")[0], writer.get_extra_info("peername")
        with self._lock:
            admission = self._admissions.get(arrival)
        held = self._open.setdefault(arrival, set())
        task = asyncio.current_task()
        assert task is not None
        try:
            if admission is None or peer[0] != admission.address or len(held) >= self._limit:
                return
            held.add(task)
            with contextlib.suppress(OSError, ValueError, TimeoutError):
                await self._relay(admission, reader, writer)
        finally:
            held.discard(task)
            writer.transport.abort()

    async def _relay(
        self, admission: Admission, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        destination, port = _original_destination(writer.get_extra_info("socket"))
        head, name = await asyncio.wait_for(_head(reader, port), HEAD_SECONDS)
        if not admission.permits(destination, name):
            return
        outgoing = await asyncio.wait_for(_connect(destination, port), CONNECT_SECONDS)
        there_reader, there = await asyncio.open_connection(sock=outgoing, limit=_CHUNK)
        try:
            there.write(head)
            async with asyncio.TaskGroup() as group:
                group.create_task(_pump(reader, there))
                group.create_task(_pump(there_reader, writer))
        finally:
            there.transport.abort()


async def _head(reader: asyncio.StreamReader, port: int) -> tuple[bytes, str | None]:
    """What the connection sent until it named its host, and the name (ValueError: none)."""
    head = b""
    while True:
        data = await reader.read(HEAD_BYTES - len(head))
        if not data:
            raise ValueError("closed before naming a host")
        head += data
        name = requested_name(head, port)
        if name is not None:
            return head, name


async def _connect(destination: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (destination, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Pass what `reader` gets on to `writer`, then its end; cut `writer` if either fails (so
    the other direction ends too)."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()


def _original_destination(sock: socket.socket) -> tuple[str, int]:
    """Where a redirected connection was going (its address and port)."""
    raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
    port, address = struct.unpack("!2xH4s8x", raw)
    return str(ipaddress.IPv4Address(address)), port
