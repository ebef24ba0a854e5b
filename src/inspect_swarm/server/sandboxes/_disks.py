"""Each namespace sandbox's disk: what its writable layers may hold.

A disk is a sparse image of the quota's size holding an empty ext4 file system (no journal:
it lives as long as its sandbox), on a loop device: writing past it fails with ENOSPC in
that sandbox and nowhere else, and on the host it takes only what was written. The empty
file system is made once (`mkfs.ext4`); each disk is that data written into a new sparse
file. This machine's kernel, like many, has no quota formats (ext4 or XFS project quotas),
and a tmpfs layer would count against the sandbox's memory.

Attaching a loop device and mounting ext4 take a few milliseconds, most of them waiting on
the kernel, and so do unmounting and detaching it (more under load): a thread keeps a few
disks ready, each a mount not attached anywhere yet (the kernel's new mount API), which the
sandbox's PID 1 attaches in its own mount namespace; and the last reference to an ended
sandbox's disk is dropped on another thread, so that neither a boot nor an end waits.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import queue
import shutil
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import anyio

_LOOP_CTL_GET_FREE, _LOOP_CONFIGURE = 0x4C82, 0x4C0A
_LO_FLAGS_AUTOCLEAR, _LO_FLAGS_DIRECT_IO = 4, 16
_LOOP_TRIES = 100
# the new mount API's calls have one number on every architecture since Linux 5.2
_SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 430, 431, 432
_FSOPEN_CLOEXEC, _FSMOUNT_CLOEXEC = 1, 1
_FSCONFIG_SET_FLAG, _FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE = 0, 1, 6
_READY = 4
"""How many disks the pool keeps ready."""
_NO_KEY = (b"", b"", 0, 0)
"""The rest of a struct loop_info64: no encryption."""
_libc = ctypes.CDLL(None, use_errno=True)


class DiskError(OSError):
    """A disk could not be made."""


@dataclass
class Disk:
    """A sandbox's disk: its image, and a mount of its file system not attached anywhere."""

    image: Path
    mount: int

    def release(self) -> None:
        """Give the disk up (its space goes once nothing has it mounted)."""
        if self.mount >= 0:
            os.close(self.mount)
            self.mount = -1
        self.image.unlink(missing_ok=True)


class DiskPool:
    """Makes the disks of one server's sandboxes, `size` bytes each, keeping a few ready."""

    def __init__(self, directory: Path, size: int, search_path: str) -> None:
        self._directory = directory
        shutil.rmtree(directory, ignore_errors=True)  # what a killed server left
        directory.mkdir(parents=True)
        self._size = size
        self._data = _empty_file_system(directory / "empty", size, search_path)
        self._made = 0
        self._lock = threading.Lock()
        self._ready: queue.Queue[Disk] = queue.Queue(maxsize=_READY)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._disposals: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._disposer = threading.Thread(target=self._dispose, name="disks-gone", daemon=True)
        self._disposer.start()

    async def take(self) -> Disk:
        """A ready disk, or a new one if none is (DiskError: why none could be made)."""
        if self._thread is None and not self._stopped.is_set():
            self._thread = threading.Thread(target=self._fill, name="disks", daemon=True)
            self._thread.start()
        try:
            return self._ready.get_nowait()
        except queue.Empty:
            return await anyio.to_thread.run_sync(self._make)

    def let_go(self, fd: int) -> None:
        """Close `fd`, the last thing of the server's holding an ended sandbox's disk, on
        the pool's own thread: the disk is unmounted and its loop device detached there."""
        self._disposals.put(fd)

    def close(self) -> None:
        """Stop making disks and release the ready ones (blocks until the threads are done)."""
        self._stopped.set()
        self._disposals.put(None)
        if self._thread is not None:
            self._thread.join()
        self._disposer.join()
        while not self._ready.empty():
            self._ready.get_nowait().release()

    def _dispose(self) -> None:
        while (fd := self._disposals.get()) is not None:
            os.close(fd)

    def _fill(self) -> None:
        while not self._stopped.is_set():
            try:
                disk = self._make()
            except OSError:
                return  # `take` makes its own, and says why it cannot
            while not self._stopped.is_set():
                with contextlib.suppress(queue.Full):
                    self._ready.put(disk, timeout=0.5)
                    break
            else:
                disk.release()

    def _make(self) -> Disk:
        with self._lock:
            self._made += 1
            image = self._directory / f"disk-{self._made}"
        fd = os.open(image, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, self._size)
            for offset, data in self._data:
                os.pwrite(fd, data, offset)
            device, number = _attach_loop(fd, str(image))
        except BaseException:
            image.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        try:
            return Disk(image, _mount_ext4(f"/dev/loop{number}"))
        except BaseException:
            image.unlink(missing_ok=True)
            raise
        finally:
            os.close(device)  # the mount holds the device; it goes once that is gone


def _empty_file_system(image: Path, size: int, search_path: str) -> list[tuple[int, bytes]]:
    """The data of an empty ext4 file system of `size` bytes, by offset (the rest is holes)."""
    mkfs = shutil.which("mkfs.ext4", path=search_path)
    needs = {"mkfs.ext4 (e2fsprogs)": mkfs, "loop devices": os.path.exists("/dev/loop-control")}
    missing = [name for name, found in needs.items() if not found]
    if mkfs is None or missing:
        raise DiskError(
            errno.ENOENT,
            f"disk quota: each sandbox's disk is an ext4 image on a loop device, and this "
            f"machine has no {' or '.join(missing)}; install them, or pass --disk-gib 0 for "
            f"sandboxes without a disk quota",
        )
    with open(image, "wb") as file:
        file.truncate(size)
    # inode tables are left unwritten until used: `noinit_itable` mounts keep them so
    options = ["-q", "-F", "-b", "4096", "-m", "0", "-O", "^has_journal,^resize_inode"]
    done = subprocess.run(
        [mkfs, *options, "-E", "lazy_itable_init=1,nodiscard", str(image)],
        capture_output=True,
        text=True,
    )
    try:
        if done.returncode != 0:
            raise DiskError(
                errno.EINVAL,
                f"disk quota: mkfs.ext4 failed for a disk of {size} bytes "
                f"({done.stderr.strip()}); pass another --disk-gib, or 0 for no quota",
            )
        return _data(image)
    finally:
        image.unlink()


def _data(image: Path) -> list[tuple[int, bytes]]:
    extents = []
    fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    try:
        end = 0
        while True:
            try:
                start = os.lseek(fd, end, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past `end`
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            extents.append((start, os.pread(fd, end - start, start)))
    finally:
        os.close(fd)
    return extents


def _attach_loop(image: int, name: str) -> tuple[int, int]:
    """A loop device (open, and its number) on `image`, detached once nothing uses it."""
    with open("/dev/loop-control", "rb", buffering=0) as control:
        for _ in range(_LOOP_TRIES):
            number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
            device = os.open(f"/dev/loop{number}", os.O_RDWR | os.O_CLOEXEC)
            # struct loop_config: fd, block size, struct loop_info64, reserved
            flags = _LO_FLAGS_AUTOCLEAR | _LO_FLAGS_DIRECT_IO
            info = struct.pack("=5Q4I64s64s32s2Q", *(0,) * 8, flags, name.encode()[:63], *_NO_KEY)
            try:
                fcntl.ioctl(
                    device, _LOOP_CONFIGURE, struct.pack("=II", image, 4096) + info + bytes(64)
                )
                return device, number
            except OSError as ex:
                os.close(device)
                if ex.errno != errno.EBUSY:  # else another disk took it first
                    raise
    raise DiskError(errno.EBUSY, "no free loop device")


def _mount_ext4(device: str) -> int:
    """A mount of the ext4 file system on `device`, attached nowhere (a descriptor)."""
    fs = _call(_SYS_FSOPEN, b"ext4", _FSOPEN_CLOEXEC)
    try:
        _call(_SYS_FSCONFIG, fs, _FSCONFIG_SET_STRING, b"source", device.encode(), 0)
        _call(_SYS_FSCONFIG, fs, _FSCONFIG_SET_FLAG, b"noinit_itable", None, 0)
        _call(_SYS_FSCONFIG, fs, _FSCONFIG_CMD_CREATE, None, None, 0)
        return _call(_SYS_FSMOUNT, fs, _FSMOUNT_CLOEXEC, 0)
    finally:
        os.close(fs)


def _call(number: int, *args: object) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        err = ctypes.get_errno()
        raise DiskError(err, f"mounting a sandbox's disk: {os.strerror(err)}")
    return result
