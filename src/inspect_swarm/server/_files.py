"""File access into a sandbox's root from the host, never following a link out of it.

The host reaches a namespace sandbox's files through `/proc/<init>/root`, where an absolute
symlink would resolve against the host's root. So paths are walked one component at a time
with `O_NOFOLLOW`, and symlinks are resolved by hand inside the sandbox's root.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

_MAX_LINKS = 40
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


@contextmanager
def _walk_parent(root: str, path: str, create_dirs: bool) -> Iterator[tuple[int, str]]:
    """Yield (fd of the parent directory, final name) of `path` inside `root`."""
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute, got {path!r}")
    # the root itself may be a magic link (/proc/<pid>/root): follow that one
    stack = [os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
    parts = _parts(path)
    links = 0
    try:
        while len(parts) > 1 or (parts and parts[0] == ".."):
            name = parts.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            try:
                info = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                if not create_dirs:
                    raise
                os.mkdir(name, 0o755, dir_fd=stack[-1])
                info = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many symbolic links", path)
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):
                    for fd in stack[1:]:
                        os.close(fd)
                    del stack[1:]
                parts = _parts(target) + parts
                continue
            stack.append(os.open(name, _DIR_FLAGS, dir_fd=stack[-1]))
        yield stack[-1], parts[0] if parts else "."
    finally:
        for fd in stack:
            os.close(fd)


def _resolve_final(root: str, path: str) -> str:
    """`path` with a symlink in its final component resolved inside `root`."""
    for _ in range(_MAX_LINKS):
        try:
            with _walk_parent(root, path, create_dirs=False) as (parent, name):
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode):
                    return path
                target = os.readlink(name, dir_fd=parent)
        except FileNotFoundError:
            return path
        base = path.rsplit("/", 1)[0] or "/"
        path = target if target.startswith("/") else f"{base}/{target}"
    raise OSError(errno.ELOOP, "too many symbolic links", path)


def read_file(root: str, path: str, limit: int | None = None) -> bytes:
    """Read a file of the sandbox (at most `limit` bytes plus one, to detect overflow)."""
    path = _resolve_final(root, path)
    with _walk_parent(root, path, create_dirs=False) as (parent, name):
        fd = _open_regular(name, os.O_RDONLY, 0, parent, path)
    with os.fdopen(fd, "rb") as file:
        return file.read() if limit is None else file.read(limit + 1)


def write_file(
    root: str, path: str, data: bytes, owner: tuple[int, int] | None = None, mode: int = 0o644
) -> None:
    """Write a file of the sandbox, making missing parent directories."""
    path = _resolve_final(root, path)
    with _walk_parent(root, path, create_dirs=True) as (parent, name):
        fd = _open_regular(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode, parent, path)
    with os.fdopen(fd, "wb") as file:
        if owner is not None:
            os.fchown(fd, *owner)
        file.write(data)


def _open_regular(name: str, flags: int, mode: int, parent: int, path: str) -> int:
    """Open a regular file only: a FIFO or a device a sandbox put in its place would block
    the server's reads and writes, or never end."""
    # non-blocking, so opening a FIFO returns (or fails) at once instead of waiting for its
    # other end
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, mode, dir_fd=parent)
    except OSError as ex:
        if ex.errno == errno.ENXIO:  # a FIFO without a reader, opened for writing
            raise OSError(errno.EINVAL, "not a regular file", path) from None
        raise
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if not stat.S_ISREG(kind):
            raise OSError(errno.EINVAL, "not a regular file", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
