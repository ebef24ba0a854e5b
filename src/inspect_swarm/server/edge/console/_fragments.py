"""Rendered fragments, shared for a moment by every console that asks for the same one.

Consoles poll: twenty of them on one page would render it twenty times a poll. A fragment
rendered in the last `ttl` seconds for the same caller and address is answered again, so a
page costs at most one rendering per `ttl` however many consoles show it, and the store of
them never holds more than `most` (an hour of polling leaves it as it was after a minute).
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
MOST_KEPT = 256


@dataclass(frozen=True)
class Fragment:
    """A rendered fragment and its entity tag (a digest of its bytes)."""

    body: bytes
    etag: str
    made: float


class Fragments:
    """The fragments rendered lately, by caller and address."""

    def __init__(self, ttl: float = TTL_SECONDS, most: int = MOST_KEPT) -> None:
        self._ttl = ttl
        self._most = most
        self._kept: OrderedDict[Hashable, Fragment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: Hashable, render: Callable[[], str]) -> Fragment:
        """The fragment `key` names, rendered by `render` unless one younger than `ttl` is
        kept."""
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is not None and now - kept.made < self._ttl:
            return kept
        body = render().encode()
        fragment = Fragment(
            body, '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"', now
        )
        self._kept[key] = fragment
        self._kept.move_to_end(key)
        while len(self._kept) > self._most:
            self._kept.popitem(last=False)
        return fragment

    def clear(self) -> None:
        """Forget every fragment (after an action changed what they show)."""
        self._kept.clear()
