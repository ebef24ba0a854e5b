"""File operations in a sandbox with a user's permissions.

The host reaches a sandbox's files as root; to give the `user` user its own permission
checks, each operation runs in a fresh thread whose file-system uid, gid and groups are the
user's (all three are per-thread on Linux), on a root directory opened beforehand.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

from .. import _files
from .._files import _resolve_final, _walk_parent
from .._isolation import Sandbox, User

T = TypeVar("T")

MAX_ENTRIES = 10_000
"""The most entries one ListDir answers."""

# setgroups(2) through glibc changes every thread; the raw system call only this one
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}


@dataclass(frozen=True)
class Entry:
    """What Stat and ListDir tell about one path."""

    name: str
    path: str
    info: os.stat_result
    target_info: os.stat_result | None
    """The symlink's target, when the entry is a symlink whose target exists."""
    symlink_target: str | None


def resolve(path: str, user: User) -> str:
    """An absolute path inside the sandbox: relative paths are under the user's home."""
    if not path:
        return user.home
    return os.path.normpath(path if path.startswith("/") else f"{user.home}/{path}")


async def as_user(sandbox: Sandbox, user: User, operation: Callable[[str], T]) -> T:
    """Run `operation(root)` on the sandbox's files with `user`'s permissions."""
    return await anyio.to_thread.run_sync(_run_as, sandbox, user, operation)


def _run_as(sandbox: Sandbox, user: User, operation: Callable[[str], T]) -> T:
    root_fd = os.open(sandbox.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    root = f"/proc/self/fd/{root_fd}"
    try:
        if user.uid == os.geteuid():
            return operation(root)
        groups = _groups(root, user)
        outcome: list[tuple[bool, object]] = []

        def run() -> None:
            try:
                _assume(user, groups)
                outcome.append((True, operation(root)))
            except BaseException as ex:
                outcome.append((False, ex))

        thread = threading.Thread(target=run, name="e2b-fs")
        thread.start()
        thread.join()
    finally:
        os.close(root_fd)
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def _groups(root: str, user: User) -> list[int]:
    groups = [user.gid]
    text = _files.read_file(root, "/etc/group").decode(errors="replace")
    for line in text.splitlines():
        entry = line.split(":")
        if len(entry) >= 4 and user.name in entry[3].split(",") and entry[2].isdigit():
            groups.append(int(entry[2]))
    return groups


def _assume(user: User, groups: list[int]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    number = _SYS_SETGROUPS.get(platform.machine())
    if number is not None:
        array = (ctypes.c_uint * len(groups))(*groups)
        if libc.syscall(number, len(groups), array) != 0:
            raise OSError(ctypes.get_errno(), "setgroups")
    libc.setfsgid(user.gid)
    libc.setfsuid(user.uid)
    # both calls return the previous id: a second call tells whether the change took
    if libc.setfsuid(user.uid) != user.uid or libc.setfsgid(user.gid) != user.gid:
        raise PermissionError(errno.EPERM, f"cannot act as user {user.name}")


def entry(root: str, path: str) -> Entry:
    """Stat `path` without following a final symlink (its target's info is added)."""
    with _walk_parent(root, path, create_dirs=False) as (parent, name):
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        link = os.readlink(name, dir_fd=parent) if stat.S_ISLNK(info.st_mode) else None
    target_info = None
    if link is not None:
        try:
            with _walk_parent(root, _resolve_final(root, path), create_dirs=False) as (
                parent,
                name,
            ):
                target_info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            target_info = None
    return Entry(os.path.basename(path) or "/", path, info, target_info, link)


def list_dir(root: str, path: str, depth: int, most: int = MAX_ENTRIES) -> list[Entry]:
    """The entries under a directory, `depth` levels down (at least one), at most `most`
    (EINVAL past it: a walk of the whole tree would hold a worker thread for long)."""
    path = _resolve_final(root, path)
    with _walk_parent(root, path, create_dirs=False) as (parent, name):
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
    with _walk_parent(root, path, create_dirs=True) as (parent, name):
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
        _walk_parent(root, source, create_dirs=False) as (source_parent, source_name),
        _walk_parent(root, destination, create_dirs=True) as (parent, name),
    ):
        os.rename(source_name, name, src_dir_fd=source_parent, dst_dir_fd=parent)


def remove(root: str, path: str) -> None:
    """Remove a file, a symlink or a whole directory."""
    with _walk_parent(root, path, create_dirs=False) as (parent, name):
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=parent)
        else:
            os.unlink(name, dir_fd=parent)
