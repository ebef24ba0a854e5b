"""File access into a sandbox's root from the host, never following a link out of it, and
with no more rights than a process of the sandbox has.

The host reaches a namespace sandbox's files through a descriptor of its root (PID 1's root,
opened `O_PATH`, reached as `/proc/self/fd/<n>`), where an absolute symlink would resolve
against the host's root. So paths are walked one component at a time
with `O_NOFOLLOW`, and symlinks are resolved by hand inside the sandbox's root. The server is
root with every capability: `run_as` does each access on a thread of its own whose file-system
ids, groups and capabilities are those of a process of the sandbox (all three are per thread
on Linux), so it reads and writes what a command of that user could, nothing more (not, for
example, /proc/1/environ, which needs CAP_SYS_PTRACE).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import BrokenExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from ._init import groups_of

T = TypeVar("T")

_MAX_LINKS = 40
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


@contextmanager
def walk_parent(root: str, path: str, create_dirs: bool) -> Iterator[tuple[int, str]]:
    """Yield (fd of the parent directory, final name) of `path` inside `root`."""
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute, got {path!r}")
    # the root itself may be a magic link (a namespace sandbox's /proc/self/fd/<n>): follow it
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


def resolve_final(root: str, path: str) -> str:
    """`path` with a symlink in its final component resolved inside `root`."""
    for _ in range(_MAX_LINKS):
        try:
            with walk_parent(root, path, create_dirs=False) as (parent, name):
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
    path = resolve_final(root, path)
    with walk_parent(root, path, create_dirs=False) as (parent, name):
        fd = _open_regular(name, os.O_RDONLY, 0, parent, path)
    with os.fdopen(fd, "rb") as file:
        return file.read() if limit is None else file.read(limit + 1)


def write_file(root: str, path: str, data: bytes, mode: int = 0o644) -> None:
    """Write a file of the sandbox, making missing parent directories (a new file or
    directory is the file-system user's, as a command's would be)."""
    path = resolve_final(root, path)
    with walk_parent(root, path, create_dirs=True) as (parent, name):
        fd = _open_regular(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode, parent, path)
    with os.fdopen(fd, "wb") as file:
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


# raw system calls: through the C library, setgroups(2) changes every thread of the server
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159, "riscv64": 159}
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91}
_CAPABILITY_VERSION_3 = 0x20080522
_libc = ctypes.CDLL(None, use_errno=True)


_ROOT_WORKERS = 4
_root_workers: dict[int, ThreadPoolExecutor] = {}
_root_workers_lock = threading.Lock()


def run_as(
    root_fd: int, name: str, uid: int, gid: int, capabilities: int, operation: Callable[[str], T]
) -> T:
    """`operation(root)` on a thread that acts as the sandbox's user `name` (uid, gid, its
    groups from the sandbox's /etc/group) with the capabilities a process of that user has
    there: `capabilities` (a bit mask) for root, none for another user. `root_fd` is the
    root directory opened `O_PATH` for this call; it is closed when done. Blocks until then.

    A root of a sandbox is the same whatever the sandbox: a few threads act as it for good.
    Another user's thread is made for the one operation (its ids are its sandbox's).
    """
    thread_root = f"/proc/self/fd/{root_fd}"
    try:
        if uid == 0:
            try:
                return _root_workers_with(capabilities).submit(operation, thread_root).result()
            except BrokenExecutor:  # a worker could not take the capabilities
                raise PermissionError(errno.EPERM, "cannot act as a sandbox's root") from None
        return _run_on_new_thread(thread_root, name, uid, gid, capabilities, operation)
    finally:
        os.close(root_fd)


def _root_workers_with(capabilities: int) -> ThreadPoolExecutor:
    with _root_workers_lock:
        workers = _root_workers.get(capabilities)
        if workers is None:
            workers = ThreadPoolExecutor(
                _ROOT_WORKERS,
                "sandbox-root",
                initializer=_capset,
                initargs=(_machine(), capabilities),
            )
            _root_workers[capabilities] = workers
        return workers


def _run_on_new_thread(
    root: str, name: str, uid: int, gid: int, capabilities: int, operation: Callable[[str], T]
) -> T:
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            _assume(root, name, uid, gid, capabilities)
            outcome.append((True, operation(root)))
        except BaseException as ex:
            outcome.append((False, ex))

    thread = threading.Thread(target=run, name="sandbox-files")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def _machine() -> str:
    machine = platform.machine()
    if machine not in _SYS_CAPSET:
        raise OSError(errno.ENOSYS, f"capset's number on {machine} is not known here")
    return machine


def _assume(root: str, name: str, uid: int, gid: int, capabilities: int) -> None:
    """Give the calling thread the sandbox user's ids, groups and capabilities (see
    `run_as`): a root's capabilities first, to read the groups and change ids with."""
    machine = _machine()
    _capset(machine, capabilities)
    groups = _groups(root, name, gid)
    array = (ctypes.c_uint * len(groups))(*groups)
    if _libc.syscall(_SYS_SETGROUPS[machine], len(groups), array) != 0:
        raise OSError(ctypes.get_errno(), "setgroups")
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    # both calls return the previous id: a second call tells whether the change took
    if _libc.setfsuid(uid) != uid or _libc.setfsgid(gid) != gid:
        raise PermissionError(errno.EPERM, f"cannot act as user {name}")
    _capset(machine, 0)


def _capset(machine: str, capabilities: int) -> None:
    """Make `capabilities` the calling thread's effective and permitted sets (none
    inheritable): it can never take more back."""
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    low, high = capabilities & 0xFFFFFFFF, capabilities >> 32
    data = (ctypes.c_uint32 * 6)(low, low, 0, high, high, 0)
    if _libc.syscall(_SYS_CAPSET[machine], header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _groups(root: str, name: str, gid: int) -> list[int]:
    try:
        text = read_file(root, "/etc/group").decode(errors="replace")
    except OSError:
        return [gid]
    return groups_of(text, name, gid)
