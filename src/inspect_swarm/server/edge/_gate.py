"""The gate: a request whose head carries none of the credentials its path needs is answered
from the connection's first bytes, before the head is parsed into a request or anything of
the application runs.

Each surface names its doors: the paths it keeps closed, the headers (or query fields) any of
which lets a request through to its own checks, and the answer to one that brings none, the
same the surface itself would give. A request that brings one, or whose path the gate cannot
read without decoding it, goes on to the application, which decides; the gate only makes the
plainest refusal cheap, since a flood of requests without a key costs each of them.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from ._access_log import log_answer, logger

_FIRST_LINE = re.compile(rb"([A-Z]+) (/[^ ?%]*)(\?[^ ]*)? HTTP/1\.[01]\r\n")
"""A request line whose path is plain (a `%` escape is decoded by the application only)."""


@dataclass(frozen=True)
class Door:
    """Paths that only requests bringing a credential may pass, and the answer to the rest."""

    paths: tuple[str, ...]
    """Paths kept closed: one ending in `/` stands for every path under it."""
    headers: tuple[str, ...]
    """Header names, any of which lets a request through (to the application's checks)."""
    status: int
    body: dict[str, Any]
    """The JSON answer to a request that brings none of them."""
    query: tuple[str, ...] = ()
    """Query fields, any of which lets a request through as well (a signed URL's)."""


Refusal = tuple[bytes, bytes]
"""An answer's status line and headers (each line ended), and its body: the protocol adds
its date and server headers between them."""


class Gate:
    """The doors of one application, and which requests pass them all whatever their path."""

    def __init__(self) -> None:
        self._doors: list[tuple[Door, Refusal]] = []
        self.forwarded: Callable[[str], bool] = lambda _: False
        """Whether a `Host` header names something else than this server (a request then
        goes on, whatever its path: a sandbox's port, say)."""

    def add(self, door: Door) -> None:
        """Keep `door`'s paths closed to requests without its credentials."""
        self._doors.append((door, _answer(door)))

    def refusal(self, head: bytes) -> Refusal | None:
        """The answer to a request whose complete head is `head`, if it brings no credential
        its path needs (None: let it through)."""
        began = time.perf_counter()
        line = _FIRST_LINE.match(head)
        if line is None:
            return None
        path = line[2].decode("ascii", "replace")
        found = next((found for found in self._doors if _under(path, found[0].paths)), None)
        if found is None:
            return None
        door, answer = found
        fields = head[line.end() - 2 :].lower()
        if any(b"\n" + name.encode() + b":" in fields for name in door.headers):
            return None
        query = (line[3] or b"")[1:].split(b"&")
        if any(part.split(b"=")[0] == name.encode() for part in query for name in door.query):
            return None
        if self.forwarded(_header(fields, b"host")):
            return None
        if logger.isEnabledFor(logging.INFO):
            log_answer(line[1].decode(), path, door.status, began)
        return answer


def _under(path: str, paths: tuple[str, ...]) -> bool:
    return any(path.startswith(door) if door[-1] == "/" else path == door for door in paths)


def _header(fields: bytes, name: bytes) -> str:
    """The value of a header of a lower-cased head ('' when it has none)."""
    start = fields.find(b"\n" + name + b":")
    if start < 0:
        return ""
    value = fields[start + len(name) + 2 : fields.find(b"\n", start + 1)]
    return value.strip().decode("latin-1")


def _answer(door: Door) -> Refusal:
    body = json.dumps(door.body, ensure_ascii=False, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {door.status} {HTTPStatus(door.status).phrase}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n"
    )
    return head.encode(), body
