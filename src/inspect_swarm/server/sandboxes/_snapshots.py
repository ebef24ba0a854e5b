"""Snapshots of namespace sandboxes: what a sandbox wrote, copied aside so that new sandboxes
can start from it.

A snapshot is a directory of the server's holding the sandbox's upper layers as they are on
its disk (`up`: each layer's files, with the overlay's whiteouts and attributes) and what its
/tmp held (`tmp`, a file system in memory in the sandbox). The copy keeps links as links,
owners, modes, times, extended attributes and device nodes, leaves holes unwritten, and shares
blocks where the file system can (reflinks; ext4 cannot, and copies). Memory is not kept: a
sandbox made from a snapshot starts its processes afresh.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

LAYERS = "up"
"""A snapshot's copy of the sandbox's upper layers, as the disk holds them (`_init.py`)."""
SCRATCH = "tmp"
"""A snapshot's copy of the sandbox's /tmp."""
_SAME_FILE = "are the same file"
"""How cp ends the line of a file it was asked to copy onto itself."""
_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SnapshotTooLarge(Exception):
    """A sandbox's files take more than a snapshot of it may."""

    def __init__(self, size: int) -> None:
        super().__init__(size)  # its one argument: the same error once unpickled
        self.size = size

    def __str__(self) -> str:
        return f"the sandbox's files take {self.size} bytes"


@dataclass(frozen=True)
class Files:
    """Where a new sandbox's files come from: a snapshot's copy, or the disk and /tmp of a
    live sandbox (paths through descriptors, `fds`, which `cp` is given)."""

    layers: str
    """The upper layers, as a disk holds them."""
    scratch: str
    """What /tmp holds."""
    fds: tuple[int, ...] = ()

    def size(self) -> int:
        """The disk space the files take (blocks)."""
        return tree_bytes(Path(self.layers)) + tree_bytes(Path(self.scratch))


def snapshot_files(path: Path) -> Files:
    """The files of the snapshot kept at `path`."""
    return Files(str(path / LAYERS), str(path / SCRATCH))


def copy_tree(source: str, target: str, fds: tuple[int, ...] = ()) -> None:
    """Copy what the directory `source` holds into `target` (made if need be), as it is;
    OSError with `cp`'s reason when it cannot (ENOSPC when the target is full). `fds`: the
    descriptors the paths go through (`/proc/self/fd/N`), which `cp` gets as they are."""
    cp = shutil.which("cp", path=os.defpath)
    if cp is None:
        raise OSError(errno.ENOENT, "snapshots are copied with cp (coreutils), not found")
    os.makedirs(target, exist_ok=True)
    # never into what is mounted below `source`: a sandbox's /tmp may hold a host directory
    # shared with it, whose files a restore would then write over on the host
    options = ["-a", "-x", "--reflink=auto", "--sparse=always", "--no-target-directory"]
    done = subprocess.run(
        # `/.`: each path's directory itself, where a path is a descriptor's link in /proc
        [cp, *options, "--", f"{source}/.", f"{target}/."],
        capture_output=True,
        text=True,
        pass_fds=fds,
        env={**os.environ, "LC_ALL": "C"},  # the reasons below are read in cp's own words
    )
    # a host directory shared with both sandboxes of a fork is one mount in the source and the
    # target, which cp refuses to copy onto itself: it is left out, as it must be
    failures = [line for line in done.stderr.splitlines() if not line.endswith(_SAME_FILE)]
    if done.returncode != 0 and (failures or not done.stderr):
        reason = "\n".join(failures)
        full = "No space left" in reason or "Disk quota" in reason
        raise OSError(errno.ENOSPC if full else errno.EIO, reason or "cp failed")


def tree_bytes(path: Path) -> int:
    """The disk space the files under `path` take (links not followed, nor what is mounted
    below it, which `copy_tree` leaves out too)."""
    device = os.lstat(path).st_dev
    total = 0
    for directory, names, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(directory, name)).st_blocks * 512
        for name in list(names):
            info = os.lstat(os.path.join(directory, name))
            total += info.st_blocks * 512
            if info.st_dev != device:
                names.remove(name)  # a mount point: its own directory only
    return total


def open_scratch(root_fd: int) -> int:
    """The sandbox's /tmp under its root (a descriptor): a mount point, which no process of
    the sandbox can swap for a link."""
    return os.open("tmp", _DIRECTORY, dir_fd=root_fd)
