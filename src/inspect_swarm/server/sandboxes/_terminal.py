"""Terminals (pseudo-terminals) for a sandbox's commands.

A namespace sandbox's terminal is a pair of its own devpts (`/dev/pts`, mounted by its PID 1),
opened through its root with a user's rights, so the terminal is that user's and the command
sees its name (`tty`) as the sandbox has it. A process-mode sandbox's is a pair of the host's.
Either way the command is started in a session of its own that takes the terminal as its
controlling terminal, so the line discipline's signals (^C, a resize's SIGWINCH) reach it.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from dataclasses import dataclass

from ._files import walk_parent

_TIOCSPTLCK = 0x40045431
_TIOCGPTN = 0x80045430
_PTMX = "/dev/pts/ptmx"


@dataclass(frozen=True)
class TerminalSize:
    """A terminal's size in character cells."""

    rows: int
    cols: int


@dataclass(frozen=True)
class Terminal:
    """A terminal's two ends: the server's (`controller`) and the command's (`device`)."""

    controller: int
    device: int
    path: str
    """The command's end, as the command's root has it."""


def open_in_root(root: str, size: TerminalSize) -> Terminal:
    """A new terminal of the devpts at `/dev/pts` under `root` (a sandbox's, reached with a
    user's rights: the terminal is theirs), of `size`."""
    with walk_parent(root, _PTMX, create_dirs=False) as (parent, name):
        controller = os.open(name, _OPEN_FLAGS, dir_fd=parent)
    try:
        fcntl.ioctl(controller, _TIOCSPTLCK, struct.pack("i", 0))
        (number,) = struct.unpack("i", fcntl.ioctl(controller, _TIOCGPTN, b"\0" * 4))
        path = f"/dev/pts/{number}"
        with walk_parent(root, path, create_dirs=False) as (parent, name):
            device = os.open(name, _OPEN_FLAGS, dir_fd=parent)
    except BaseException:
        os.close(controller)
        raise
    resize(controller, size)
    return Terminal(controller, device, path)


def open_on_host(size: TerminalSize) -> Terminal:
    """A new terminal of the host's devpts, of `size`."""
    controller, device = os.openpty()
    os.set_inheritable(device, False)
    resize(controller, size)
    return Terminal(controller, device, os.ttyname(device))


def resize(controller: int, size: TerminalSize) -> None:
    """Set a terminal's size (the kernel signals its foreground process group, SIGWINCH)."""
    fcntl.ioctl(controller, termios.TIOCSWINSZ, struct.pack("HHHH", size.rows, size.cols, 0, 0))


def take_controlling_terminal() -> None:
    """Make stdin, a terminal, the calling session leader's controlling terminal (a child's
    hook before exec)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


_OPEN_FLAGS = os.O_RDWR | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC
