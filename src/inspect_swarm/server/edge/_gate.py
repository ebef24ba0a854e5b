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

_FIRST_LINE = re.compile(rb"([A-Z]+) (/[^ ?%]*)(\?[^ ]*)? HTTP/1\.([01])\r\n")
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
    opens: Callable[[str], bool] | None = None
    """Whether the value of the first of `headers` a request brings may be a credential
    that opens the door (None: let the application judge every one); one that cannot is
    answered `wrong` (a key the server does not know, say)."""
    wrong: dict[str, Any] | None = None
    """The JSON answer to a credential `opens` refuses (None: `body`)."""


Refusal = tuple[bytes, bytes]
"""An answer's status line and headers (each line ended), and its body: the protocol adds
its date and server headers between them."""


class Gate:
    """The doors of one application, and which requests pass them all whatever their path."""

    def __init__(self) -> None:
        self._doors: list[tuple[Door, Refusal, Refusal]] = []
        self.forwarded: Callable[[str], bool] = lambda _: False
        """Whether a `Host` header names something else than this server (a request then
        goes on, whatever its path: a sandbox's port, say)."""

    def add(self, door: Door) -> None:
        """Keep `door`'s paths closed to requests without its credentials."""
        wrong = door.body if door.wrong is None else door.wrong
        self._doors.append((door, _answer(door.status, door.body), _answer(door.status, wrong)))

    def refusal(self, head: bytes) -> Refusal | None:
        """The answer to a request whose complete head is `head`, if it brings no credential
        its path needs, or one its door knows to be wrong (None: let it through)."""
        began = time.perf_counter()
        line = _FIRST_LINE.match(head)
        if line is None:
            return None
        path = line[2].decode("ascii", "replace")
        found = next((found for found in self._doors if _under(path, found[0].paths)), None)
        if found is None:
            return None
        door, answer, wrong = found
        start = line.end() - 2
        fields = head[start:].lower()
        brought = [name for name in door.headers if b"\n" + name.encode() + b":" in fields]
        if brought:
            if door.opens is None or door.opens(_header(head[start:], fields, brought[0])):
                return None
            answer = wrong
        query = (line[3] or b"")[1:].split(b"&")
        if any(part.split(b"=")[0] == name.encode() for part in query for name in door.query):
            return None
        host = _header(fields, fields, "host")
        if (not host and line[4] == b"1") or self.forwarded(host):
            return None  # h11's to refuse (HTTP/1.1 needs a host), or the port's
        if logger.isEnabledFor(logging.INFO):
            log_answer(line[1].decode(), path, door.status, began)
        return answer


def _under(path: str, paths: tuple[str, ...]) -> bool:
    return any(path.startswith(door) if door[-1] == "/" else path == door for door in paths)


def _header(fields: bytes, lowered: bytes, name: str) -> str:
    """The first value of a header in a head's header lines, found in them lower-cased
    ('' when there is none)."""
    start = lowered.find(b"\n" + name.encode() + b":")
    if start < 0:
        return ""
    value = fields[start + len(name) + 2 : fields.find(b"\n", start + 1)]
    return value.strip().decode("latin-1")


def _answer(status: int, answer: dict[str, Any]) -> Refusal:
    body = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n"
    )
    return head.encode(), body
