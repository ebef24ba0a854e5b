"""File operations in a sandbox with a user's permissions (see `Sandbox.as_user`)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

from ...engines._engine import LiveSandbox
from ...sandboxes._files import resolve_final, walk_parent
from ...sandboxes._isolation import User

T = TypeVar("T")

MAX_ENTRIES = 10_000
"""The most entries one ListDir answers."""


@dataclass(frozen=True)
class Entry:
    """What Stat and ListDir tell about one path."""

    name: str
    path: str
    info: os.stat_result
    target_info: os.stat_result | None
    """The symlink's target, when the entry is a symlink whose target exists."""
    symlink_target: str | None
    """The absolute path in the sandbox a symlink leads to, every link on the way followed."""


def resolve(path: str, user: User) -> str:
    """An absolute path inside the sandbox: relative paths are under the user's home."""
    if not path:
        return user.home
    return os.path.normpath(path if path.startswith("/") else f"{user.home}/{path}")


async def as_user(sandbox: LiveSandbox, user: User, operation: Callable[[str], T]) -> T:
    """Run `operation(root)` on the sandbox's files with `user`'s permissions, off the loop."""
    return await anyio.to_thread.run_sync(sandbox.as_user, user, operation)


def entry(root: str, path: str) -> Entry:
    """Stat `path` without following a final symlink (its target's info is added)."""
    with walk_parent(root, path, create_dirs=False) as (parent, name):
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    target, target_info = None, None
    if stat.S_ISLNK(info.st_mode):
        target = os.path.normpath(resolve_final(root, path))
        try:
            with walk_parent(root, target, create_dirs=False) as (parent, name):
                target_info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            target_info = None
    return Entry(os.path.basename(path) or "/", path, info, target_info, target)


def list_dir(root: str, path: str, depth: int, most: int = MAX_ENTRIES) -> list[Entry]:
    """The entries under a directory, `depth` levels down (at least one), at most `most`
    (EINVAL past it: a walk of the whole tree would hold a worker thread for long)."""
    path = resolve_final(root, path)
    with walk_parent(root, path, create_dirs=False) as (parent, name):
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
    try:
        names = sorted(os.listdir(fd))
    finally:
        os.close(fd)
    entries: list[Entry] = []
    for child in names:
        found = entry(root, f"{path.rstrip('/')}/{child}")
        entries.append(found)
        if depth > 1 and stat.S_ISDIR(found.info.st_mode):
            entries.extend(list_dir(root, found.path, depth - 1, most - len(entries)))
        if len(entries) > most:
            raise OSError(
                errno.EINVAL,
                f"more than {MAX_ENTRIES} entries; list fewer levels or a narrower directory",
            )
    return entries


def make_dir(root: str, path: str) -> bool:
    """Make a directory and its parents; False when it already exists."""
    with walk_parent(root, path, create_dirs=True) as (parent, name):
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            if stat.S_ISDIR(os.stat(name, dir_fd=parent).st_mode):
                return False
            raise
    return True


def move(root: str, source: str, destination: str) -> None:
    """Rename `source` to `destination`, making the destination's parents."""
    with (
        walk_parent(root, source, create_dirs=False) as (source_parent, source_name),
        walk_parent(root, destination, create_dirs=True) as (parent, name),
    ):
        os.rename(source_name, name, src_dir_fd=source_parent, dst_dir_fd=parent)


def remove(root: str, path: str) -> None:
    """Remove a file, a symlink or a whole directory."""
    with walk_parent(root, path, create_dirs=False) as (parent, name):
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=parent)
        else:
            os.unlink(name, dir_fd=parent)
