"""Reach the server from inside a sandbox whose network is loopback only.

A sandbox's network namespace has only `lo`, so `MARITIME_API_URL` (the server's loopback
address) would lead nowhere. The sandbox's PID 1 opens a listening socket on that port
*inside* the namespace (a socket stays in the namespace it was made in) and hands it to the
server, which passes every connection on to itself, so agents inside use the same URL as
everyone else.

One thread waits on the listeners of every sandbox (most sandboxes never connect: a thread
each would cost more than their commands), and two threads pump each connection. A sandbox
may hold at most `limit` connections at once (each costs the server three descriptors and
two threads): one past it is accepted and closed at once, and the sandbox sees it reset. The
server knows a forwarded connection by its source address and port (`forwarded`), so that
its cap on the connections of one client address counts sandboxes by their own cap instead.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading

_CHUNK = 65536
MAX_CONNECTIONS = 128
"""The most connections one sandbox may have open to the server, unless told otherwise."""


class Forwarder:
    """Passes connections accepted by sandboxes' listeners to the server at `target`."""

    def __init__(self, target: tuple[str, int], limit: int = MAX_CONNECTIONS) -> None:
        self._target = target
        self._limit = limit
        self._listeners: dict[int, _Listener] = {}
        self._sources: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._epoll: select.epoll | None = None
        self._stop = -1
        """The write end of a pipe that stops the accepting thread."""

    def add(self, listener: socket.socket) -> None:
        """Forward the connections `listener` accepts (it is the forwarder's from now on)."""
        listener.setblocking(False)
        with self._lock:
            if self._epoll is None:
                self._epoll = select.epoll()
                wake, self._stop = os.pipe()
                self._epoll.register(wake, select.EPOLLIN)
                threading.Thread(target=self._accept, args=(self._epoll, wake), daemon=True).start()
            self._listeners[listener.fileno()] = _Listener(listener)
            # the waiting thread sees a descriptor added while it waits
            self._epoll.register(listener, select.EPOLLIN)

    def remove(self, listener: socket.socket) -> None:
        """Stop listening on `listener`, close it and cut its connections."""
        with self._lock:
            entry = self._listeners.pop(listener.fileno(), None)
            if self._epoll is not None:
                with contextlib.suppress(OSError):
                    self._epoll.unregister(listener)
        listener.close()
        if entry is not None:
            with self._lock:
                entry.closed = True
                pairs = list(entry.pairs)
            for pair in pairs:
                pair.cut()

    def forwarded(self, peer: tuple[str, int]) -> bool:
        """Whether a connection to the server from `peer` is one this forwarder made."""
        with self._lock:
            return peer in self._sources

    def close(self) -> None:
        """Stop the accepting thread (the listeners must have been removed)."""
        with self._lock:
            if self._stop >= 0:
                os.close(self._stop)  # the thread reads end of file, and closes its end
                self._stop, self._epoll = -1, None

    def _accept(self, epoll: select.epoll, wake: int) -> None:
        with epoll:
            try:
                while True:
                    for fd, _ in epoll.poll():
                        if fd == wake:
                            return
                        with self._lock:
                            entry = self._listeners.get(fd)
                        if entry is not None:  # else removed since the wait ended
                            self._connect(entry)
            finally:
                os.close(wake)

    def _connect(self, entry: _Listener) -> None:
        try:
            inside, _ = entry.listener.accept()
        except OSError:
            return  # another wake-up took it, or the listener was closed
        with self._lock:
            full = len(entry.pairs) >= self._limit
        if full:
            _reset(inside)
            return
        inside.setblocking(True)
        try:
            outside, address = self._dial()
        except OSError:
            inside.close()
            return
        pair = _Pair(inside, outside, address)
        with self._lock:
            entry.pairs.add(pair)
            cut = entry.closed
        if cut:
            pair.cut()
        for source, sink in ((inside, outside), (outside, inside)):
            args = (entry, pair, source, sink)
            threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(
        self, entry: _Listener, pair: _Pair, source: socket.socket, sink: socket.socket
    ) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        # pass the end of one direction on; the other direction may still be talking
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            pair.pumping -= 1
            if pair.pumping == 0:
                entry.pairs.discard(pair)
                self._sources.discard(pair.source)
                pair.close()

    def _dial(self) -> tuple[socket.socket, tuple[str, int]]:
        """A connection to the server, its source known to `forwarded` before it connects."""
        family = socket.AF_INET6 if ":" in self._target[0] else socket.AF_INET
        outside = socket.socket(family, socket.SOCK_STREAM)
        try:
            outside.bind((self._target[0], 0))  # the server's own address: this machine's
            source: tuple[str, int] = outside.getsockname()[:2]
            with self._lock:
                self._sources.add(source)
            try:
                outside.connect(self._target)
            except OSError:
                with self._lock:
                    self._sources.discard(source)
                raise
        except OSError:
            outside.close()
            raise
        return outside, source


def _reset(sock: socket.socket) -> None:
    """Close a connection with a reset, so its other end knows at once it was refused."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _Listener:
    """One sandbox's listener and its open connections."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.pairs: set[_Pair] = set()
        self.closed = False


class _Pair:
    """A connection from inside the sandbox and its connection to the server."""

    def __init__(
        self, inside: socket.socket, outside: socket.socket, source: tuple[str, int]
    ) -> None:
        self.sockets = (inside, outside)
        self.source = source
        """The outside connection's address and port."""
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
