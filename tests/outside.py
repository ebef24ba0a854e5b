"""A stand-in for the internet, for tests of sandboxes' way out: the calling thread enters a
network namespace of its own (the server's, with only `lo` up), joined by a veth pair to a
second namespace (the "internet") where HTTP servers answer on `OUTSIDE` and `ELSEWHERE`.

Nothing leaves these two namespaces, which go when the test is done: the thread is put back
in the namespace it came from. Every process the thread starts meanwhile (a server under test)
is in the server's namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

_CLONE_NEWNET = 0x40000000
OUTSIDE = "198.51.100.1"
"""An outside host, as sandboxes reach it."""
ELSEWHERE = "198.51.100.3"
"""Another outside host."""
SERVER_SIDE = "198.51.100.2"
"""The server namespace's own address towards the internet (the host's other address)."""
HTTP_PORT = 8080


@dataclass(frozen=True)
class Internet:
    """The stand-in internet, as the server's namespace sees it."""

    namespace: str
    """The server's network namespace (`/proc/thread-self/ns/net`'s link)."""


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
def internet() -> Iterator[Internet]:
    """Put this thread in a new network namespace joined to a stand-in internet."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        _unshare()
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
            f"ip addr add {ELSEWHERE}/24 dev eth0 && ip link set eth0 up"
        )
        for argv in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "link", "add", "inet0", "type", "veth", "peer", "name", "eth0", "netns",
             f"/proc/{far.pid}/ns/net"],
            ["ip", "addr", "add", f"{SERVER_SIDE}/24", "dev", "inet0"],
            ["ip", "link", "set", "inet0", "up"],
            [*inside, "sh", "-c", setup],
        ):  # fmt: skip
            subprocess.run(argv, check=True)
        server = [sys.executable, "-m", "http.server", "--bind", "0.0.0.0", str(HTTP_PORT)]
        processes.append(
            subprocess.Popen(
                [*inside, *server], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        for _ in range(600):
            if _reachable(OUTSIDE, HTTP_PORT):
                break
            time.sleep(0.05)
        yield Internet(ours)
    finally:
        for process in reversed(processes):
            process.kill()
            process.wait()
        _setns(home)
        os.close(home)


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
