"""Rendered fragments, shared for a moment by every console that asks for the same one.

Consoles look again and again: twenty of them on one page would render it twenty times a
tick. A fragment rendered lately for the same caller and address is answered again, so a
page costs at most one rendering per `ttl` however many consoles show it, and the store of
them never holds more than `most` (an hour of looking leaves it as it was after a minute).
A fragment that is slow to render (the runs page of a store of thousands of runs, on a busy
machine) is kept for `RENDER_SHARE` times as long as it took, so keeping it up to date never
takes more than a fifth of a core. One made from a `version` of what it shows (the runs'
count of changes) is kept, whatever its age, until that moves on: a console left open on
runs that are over renders nothing.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

TTL_SECONDS = 0.25
"""How long a rendered fragment is answered again (the script polls every 0.5 s, so a
change shows within a second)."""
MOST_KEPT = 64
RENDER_SHARE = 5


@dataclass(frozen=True)
class Fragment:
    """A rendered fragment and its entity tag (a digest of its bytes)."""

    body: bytes
    etag: str
    made: float
    kept: float
    """How long it is answered again: the ttl, or longer where it was slow to render."""
    version: int | None
    """What it was made from, where its maker can tell (the count of the runs' changes)."""


class Fragments:
    """The fragments rendered lately, by caller and address."""

    def __init__(self, ttl: float = TTL_SECONDS, most: int = MOST_KEPT) -> None:
        self._ttl = ttl
        self._most = most
        self._kept: OrderedDict[Hashable, Fragment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: Hashable, render: Callable[[], str], version: int | None = None) -> Fragment:
        """The fragment `key` names, rendered by `render` unless one is kept that is young
        enough or was made from the same `version` of what it shows."""
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is not None and (
            now - kept.made < kept.kept or (version is not None and kept.version == version)
        ):
            return kept
        body = render().encode()
        took = time.monotonic() - now
        tag = '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'
        fragment = Fragment(body, tag, now, max(self._ttl, RENDER_SHARE * took), version)
        self._kept[key] = fragment
        self._kept.move_to_end(key)
        while len(self._kept) > self._most:
            self._kept.popitem(last=False)
        return fragment

    def clear(self) -> None:
        """Forget every fragment (after an action changed what they show)."""
        self._kept.clear()
