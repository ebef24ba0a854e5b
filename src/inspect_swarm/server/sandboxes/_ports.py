"""Connect to a port of a sandbox's own loopback, from the server.

A socket belongs to the network namespace it was made in, so a thread of the server enters
the sandbox's namespace just long enough to make one, and returns to the server's: the
connection then reaches that sandbox's loopback and nothing else (not the host's ports, not
another sandbox's), whatever address the sandbox's program listens on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Iterator

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
DIAL_TIMEOUT = 10.0
"""How long a connection to a sandbox's port may take to be accepted, in seconds."""


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


@contextlib.contextmanager
def entered(namespace: int) -> Iterator[None]:
    """This thread in the network namespace open as `namespace`, for the while: the sockets
    it makes meanwhile belong there."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(namespace)
        try:
            yield
        finally:
            # the thread may be one of a pool: it must leave as the server's again
            _setns(own)
    finally:
        os.close(own)


def dial(namespace: int, port: int) -> socket.socket:
    """A TCP connection to `port` on the loopback of the network namespace open as
    `namespace`; blocks. ConnectionRefusedError when nothing listens there."""
    with entered(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(DIAL_TIMEOUT)
        sock.connect(("127.0.0.1", port))
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        with contextlib.suppress(OSError):
            sock.close()
        raise
    return sock
