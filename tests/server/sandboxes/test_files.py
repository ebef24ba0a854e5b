"""File access into a sandbox's root: only regular files, never blocking the server."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from inspect_swarm.server.sandboxes._files import read_file, write_file


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    """Fail a call that blocks (a blocking open of a FIFO waits for its other end forever)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the file access blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(5)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def root(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_bytes(b"data")
    return str(tmp_path)


def test_a_fifo_is_refused_at_once_for_reading_and_writing(root: str) -> None:
    with pytest.raises(OSError, match="not a regular file"):
        read_file(root, "/fifo")
    with pytest.raises(OSError, match="not a regular file"):
        write_file(root, "/fifo", b"x")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_is_refused(root: str) -> None:
    os.mknod(Path(root) / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    with pytest.raises(OSError, match="not a regular file"):
        read_file(root, "/zero", 10)


def test_regular_files_read_and_write_as_before(root: str) -> None:
    assert read_file(root, "/file") == b"data"
    write_file(root, "/new/file", b"more")
    assert read_file(root, "/new/file") == b"more"
    with pytest.raises(IsADirectoryError):
        read_file(root, "/new")
