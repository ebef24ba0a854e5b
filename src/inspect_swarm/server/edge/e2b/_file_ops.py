"""File operations in a sandbox with a user's permissions (see `Sandbox.as_user`)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    metadata: dict[str, str]
    """What the file's `user.` extended attributes hold (of a symlink's target)."""


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
    try:
        metadata = read_metadata(root, target or path) if target_info or not target else {}
    except OSError:  # a file system without extended attributes, or gone meanwhile
        metadata = {}
    return Entry(os.path.basename(path) or "/", path, info, target_info, target, metadata)


_METADATA = "user."
"""The namespace of extended attributes that hold a file's metadata (E2B's keeps it there)."""


@contextmanager
def _inode(root: str, path: str) -> Iterator[str]:
    """A path that reaches the inode at `path` (not following a final symlink) itself."""
    with walk_parent(root, path, create_dirs=False) as (parent, name):
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def read_metadata(root: str, path: str) -> dict[str, str]:
    """A file's metadata."""
    with _inode(root, path) as inode:
        names = [name for name in os.listxattr(inode) if name.startswith(_METADATA)]
        return {
            name.removeprefix(_METADATA): os.getxattr(inode, name).decode(errors="replace")
            for name in names
        }


def write_metadata(root: str, path: str, metadata: dict[str, str]) -> None:
    """Add to a file's metadata (a key it has is given the new value)."""
    with _inode(root, path) as inode:
        for key, value in metadata.items():
            os.setxattr(inode, _METADATA + key, value.encode())


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
