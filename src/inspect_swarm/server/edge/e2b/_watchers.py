"""Watches of a sandbox's directories as the daemon serves them: followed on a stream
(`WatchDir`) or kept and polled (`CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`)."""

from __future__ import annotations

import secrets

import anyio
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_pb as pb

from ...engines._engine import LiveWatch
from ...sandboxes._watch import Change

MAX_WATCHERS = 32
"""The most watches one sandbox has at once (each holds an inotify instance of the host's)."""
MAX_KEPT = 10_000
"""The most changes a watcher keeps between two polls."""

_KINDS = {
    "create": pb.EventType.CREATE,
    "write": pb.EventType.WRITE,
    "remove": pb.EventType.REMOVE,
    "rename": pb.EventType.RENAME,
    "chmod": pb.EventType.CHMOD,
}


def _event(change: Change) -> pb.FilesystemEvent:
    return pb.FilesystemEvent(name=change.name, type=_KINDS[change.kind])


class Watcher:
    """One watch's changes, gathered by `collect` until taken."""

    def __init__(self, watch: LiveWatch) -> None:
        self.id = f"w-{secrets.token_hex(8)}"
        self._watch = watch
        self._events: list[pb.FilesystemEvent] = []
        self._missed = 0
        self._changed = anyio.Event()
        self.ended = False
        """Whether the watch has ended (its directory or its sandbox is gone, or closed)."""

    async def collect(self) -> None:
        """Gather the watch's changes until it ends (a task of the server)."""
        try:
            async for batch in self._watch.changes():
                room = MAX_KEPT - len(self._events)
                self._events += [_event(change) for change in batch[:room]]
                self._missed += max(0, len(batch) - room)
                self._changed.set()
        finally:
            self.ended = True
            self._changed.set()

    def take(self) -> list[pb.FilesystemEvent]:
        """The changes gathered since the last take (RESOURCE_EXHAUSTED, dropping them, if
        more came than are kept)."""
        taken, self._events = self._events, []
        missed, self._missed = self._missed, 0
        self._changed = anyio.Event()
        if missed:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED,
                f"watcher {self.id}: over {MAX_KEPT} changes came between two polls and "
                f"{missed} were not kept; poll more often or watch a narrower directory",
            )
        return taken

    async def next(self, seconds: float) -> list[pb.FilesystemEvent] | None:
        """The changes gathered once some come, within `seconds` (maybe none); None once the
        watch has ended and every change was taken."""
        if not self.ended:
            with anyio.move_on_after(seconds):
                await self._changed.wait()
        taken = self.take()
        return None if self.ended and not taken else taken

    def close(self) -> None:
        """Stop watching."""
        self._watch.close()


def check_room(watchers: dict[str, Watcher]) -> None:
    """Refuse a watch past MAX_WATCHERS of one sandbox."""
    if len(watchers) >= MAX_WATCHERS:
        raise ConnectError(
            Code.RESOURCE_EXHAUSTED,
            f"this sandbox already has {MAX_WATCHERS} watches; remove one first",
        )
