"""Watching a directory of a sandbox (and, if asked, every directory below it) for changes.

One inotify instance per watch. Each directory is added as a user of the sandbox would add
it: found by walking the sandbox's root (`sandboxes._files`) on a thread with that user's
rights, so a watch reaches no directory outside the root and none the user may not read.
The kernel reports a change once it has happened; the kinds are E2B's (those of Go's
fsnotify, which E2B's daemon uses).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ._files import resolve_final, walk_parent

_IN_MODIFY, _IN_ATTRIB, _IN_MOVED_FROM, _IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
_IN_CREATE, _IN_DELETE, _IN_DELETE_SELF, _IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED, _IN_ONLYDIR, _IN_ISDIR = 0x4000, 0x8000, 0x01000000, 0x40000000
_KINDS = (
    (_IN_CREATE | _IN_MOVED_TO, "create"),
    (_IN_MODIFY, "write"),
    (_IN_DELETE | _IN_DELETE_SELF, "remove"),
    (_IN_MOVED_FROM | _IN_MOVE_SELF, "rename"),
    (_IN_ATTRIB, "chmod"),
)
_MASK = sum(mask for mask, _ in _KINDS)
_HEADER = struct.Struct("iIII")
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = 65536

MAX_DIRECTORIES = 10_000
"""The most directories one watch follows (a recursive watch of a larger tree is refused)."""

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Change:
    """A change under a watched directory: `name` relative to it, `kind` one of create,
    write, remove, rename, chmod."""

    name: str
    kind: str


def _checked(result: int, path: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return result


def _add(root: str, inotify: int, path: str) -> int:
    """Watch the directory `path` of the sandbox whose root is `root`; its watch descriptor."""
    path = resolve_final(root, path)
    with walk_parent(root, path, create_dirs=False) as (parent, name):
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        # the descriptor's own path: the directory just found, whatever is renamed meanwhile
        target = f"/proc/self/fd/{fd}".encode()
        return _checked(_libc.inotify_add_watch(inotify, target, _MASK | _IN_ONLYDIR), path)
    finally:
        os.close(fd)


def _tree(root: str, path: str) -> tuple[list[str], list[str]]:
    """The directories from `path` down (not through symlinks), at most MAX_DIRECTORIES, and
    every entry below `path`."""
    directories, entries, index = [path], list[str](), 0
    while index < len(directories):
        directory = directories[index]
        index += 1
        with walk_parent(root, directory, create_dirs=False) as (parent, name):
            fd = os.open(name, _LIST_FLAGS, dir_fd=parent)
        try:
            with os.scandir(fd) as found:
                below = [(e.name, e.is_dir(follow_symlinks=False)) for e in found]
        finally:
            os.close(fd)
        for each, is_dir in below:
            entries.append(f"{directory.rstrip('/')}/{each}")
            if is_dir:
                directories.append(entries[-1])
        if len(directories) > MAX_DIRECTORIES:
            raise OSError(errno.ENOSPC, f"over {MAX_DIRECTORIES} directories to watch", path)
    return directories, entries


def _below(top: str, path: str) -> str:
    """`path` relative to the directory `top` ("." for itself)."""
    return os.path.relpath(os.path.normpath(path), top)


class DirectoryWatch:
    """The changes under one directory of a sandbox, from its start until `close`."""

    def __init__(
        self,
        as_user: Callable[[Callable[[str], Any]], Any],
        path: str,
        recursive: bool,
    ) -> None:
        self._as_user = as_user
        """Runs an operation on the sandbox's root with the watching user's rights (blocks)."""
        self._path = path.rstrip("/") or "/"
        self._recursive = recursive
        self._fd = _checked(_libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC), path)
        self._dirs: dict[int, str] = {}
        """Each watched directory's descriptor, and its path relative to the watched one."""

    async def start(self) -> None:
        """Watch the directory (and, if recursive, those below it): OSError if it cannot."""
        await self._watch(self._path)

    async def _watch(self, path: str) -> list[str]:
        """Watch `path` (and the directories below it if recursive); the entries below it,
        relative to the watched directory (a recursive watch's only)."""

        def add(root: str) -> tuple[dict[int, str], list[str]]:
            directories, entries = _tree(root, path) if self._recursive else ([path], [])
            return {_add(root, self._fd, each): each for each in directories}, entries

        added, entries = await anyio.to_thread.run_sync(self._as_user, add)
        self._dirs |= {wd: _below(self._path, each) for wd, each in added.items()}
        return [_below(self._path, each) for each in entries]

    async def changes(self) -> AsyncIterator[list[Change]]:
        """Batches of changes as the kernel reports them, until the watched directory is gone
        (or the watch closed)."""
        while self._dirs and self._fd >= 0:
            try:
                data = os.read(self._fd, _READ)
            except BlockingIOError:
                try:
                    await anyio.wait_readable(self._fd)
                except anyio.ClosedResourceError:
                    return
                continue
            yield await self._parse(data)

    async def _parse(self, data: bytes) -> list[Change]:
        changes: list[Change] = []
        offset = 0
        while offset < len(data):
            wd, mask, _, size = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size : offset + _HEADER.size + size]
            offset += _HEADER.size + size
            if mask & _IN_IGNORED:
                self._dirs.pop(wd, None)
                continue
            base = self._dirs.get(wd)
            if base is None:
                continue
            if not raw:
                continue  # a directory's own change: its parent's watch reports it
            entry = raw.rstrip(b"\0").decode(errors="replace")
            name = _below(".", f"{base}/{entry}")
            changes += [Change(name, kind) for flags, kind in _KINDS if mask & flags]
            if self._recursive and mask & _IN_ISDIR and mask & (_IN_CREATE | _IN_MOVED_TO):
                # a directory that came in is followed too (one gone meanwhile is no error),
                # and what it held before its watch began is reported as created
                with contextlib.suppress(OSError):
                    found = await self._watch(f"{self._path.rstrip('/')}/{name}")
                    changes += [Change(each, "create") for each in found]
        return changes

    def close(self) -> None:
        """Stop watching."""
        if self._fd >= 0:
            anyio.notify_closing(self._fd)
            os.close(self._fd)
            self._fd = -1
