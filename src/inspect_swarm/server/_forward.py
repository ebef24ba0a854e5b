"""Reach the server from inside a sandbox whose network is loopback only.

A sandbox's network namespace has only `lo`, so `MARITIME_API_URL` (the server's loopback
address) would lead nowhere. The server opens a listening socket on that port *inside* the
sandbox's namespace (a socket stays in the namespace it was made in) and passes every
connection to the server itself, so agents inside use the same URL as everyone else.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading

_CLONE_NEWNET = 0x40000000
_CHUNK = 65536


def _listen_in_namespace(netns: str, family: socket.AddressFamily, port: int) -> socket.socket:
    """A socket listening on `port` of every address of the network namespace `netns`."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        # setns changes only this thread's namespace, and the thread ends right after
        try:
            fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns into the sandbox's network")
            finally:
                os.close(fd)
            listener = socket.socket(family, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("", port))
            listener.listen(128)
            made.append(listener)
        except BaseException as ex:
            made.append(ex)

    thread = threading.Thread(target=make, name="forward-setns")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


class Forwarder:
    """Passes connections made to `port` inside a sandbox to the server at `target`."""

    def __init__(self, init_pid: int, port: int, target: tuple[str, int]) -> None:
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        self._listener = _listen_in_namespace(f"/proc/{init_pid}/ns/net", family, port)
        self._target = target
        self._open: set[_Pair] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="forward-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inside, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                outside = socket.create_connection(self._target)
            except OSError:
                inside.close()
                continue
            pair = _Pair(inside, outside)
            with self._lock:
                self._open.add(pair)
            for source, sink in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pump, args=(pair, source, sink), daemon=True).start()

    def _pump(self, pair: _Pair, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        # pass the end of one direction on; the other direction may still be talking
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            pair.pumping -= 1
            if pair.pumping == 0:
                self._open.discard(pair)
                pair.close()

    def close(self) -> None:
        """Stop listening and cut every connection."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for pair in self._open:
                pair.cut()


class _Pair:
    """A connection from inside the sandbox and its connection to the server."""

    def __init__(self, inside: socket.socket, outside: socket.socket) -> None:
        self.sockets = (inside, outside)
        self.pumping = 2

    def cut(self) -> None:
        """Wake both pumps; the last one to stop closes the sockets."""
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close both sockets."""
        for sock in self.sockets:
            sock.close()
