"""A fragment kept up to date over one response: the console's live updates.

A console asks for its fragment once with `Accept: text/event-stream` and keeps the answer
open. Every `TICK_SECONDS` the server looks at the fragment (rendered afresh at most once
per `Fragments` ttl, however many consoles watch it) and sends it again only when its bytes
changed, as a server-sent event. A console open for an hour costs one connection and a look
a tick, never a request; its key is checked again at every tick, so a key that stops
working (its lease released) ends the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio

from ...model._types import SwarmError
from .._auth import Keys, Principal
from ._fragments import Fragment

TICK_SECONDS = 0.5
"""How often a stream looks for a change: with the fragments' ttl, a change shows within
a second."""
_KEEPALIVE_TICKS = 30
"""Ticks without a change after which a comment tells the console the stream is alive."""


def event(kind: str, data: bytes) -> bytes:
    """One server-sent event: every line of `data` as a `data:` line."""
    lines = b"".join(b"data: " + line + b"\n" for line in data.split(b"\n"))
    return b"event: " + kind.encode() + b"\n" + lines + b"\n"


async def events(
    keys: Keys, who: Principal, look: Callable[[], Fragment], first: Fragment
) -> AsyncIterator[bytes]:
    """The stream of one console: `first`, then each changed fragment `look` gives, while
    the key stands for `who`."""
    last = first.etag
    yield event("fragment", first.body)
    quiet = 0
    while True:
        await anyio.sleep(TICK_SECONDS)
        if keys.lookup(who.key) != who:
            yield event("refused", b"this key is no longer accepted: sign in again")
            return
        try:
            made = look()
        except SwarmError as ex:  # what it showed is gone (a run purged, say)
            yield event("gone", ex.message.encode())
            return
        if made.etag != last:
            last, quiet = made.etag, 0
            yield event("fragment", made.body)
        elif (quiet := quiet + 1) >= _KEEPALIVE_TICKS:
            quiet = 0
            yield b": alive\n\n"
