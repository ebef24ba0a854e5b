"""Host child processes on anyio: spawn into cgroups, stream output, wait on a pidfd.

A sandbox's processes must join its cgroups and ask to be killed with the server
(PR_SET_PDEATHSIG) before they run. A Python pre-exec hook would do both, but it makes
`subprocess` fork the whole server instead of using vfork, and it blocks the event loop until
the child has joined its cgroups (a cgroup move waits for an RCU grace period): together some
15-20 ms per process, one at a time. So the child does it after exec, as `setpriv
--pdeathsig` and a few lines of `/bin/sh`, and the server only pays for a vfork. Waiting on a
pidfd and on non-blocking pipes keeps everything on anyio, so asyncio and trio both work.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import anyio

_PR_SET_PDEATHSIG = 1
_READ_CHUNK = 65536
_SETPRIV = shutil.which("setpriv")
# argv: cgroup.procs files, "--", the command; the shell moves itself, then execs the command
_JOIN_CGROUPS = (
    'while [ "$1" != -- ]; do echo 0 > "$1" || { echo "cannot join cgroup $1" >&2; exit 125; }; '
    'shift; done; shift; exec "$@"'
)


def _pdeathsig_hook() -> Callable[[], None]:
    """Without setpriv: PR_SET_PDEATHSIG from a pre-exec hook (forks the whole server)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return hook


def _wrapped_argv(options: SpawnOptions) -> list[str]:
    """The command line that joins the cgroups and dies with the server, then runs argv."""
    argv = list(options.argv)
    if options.cgroup_procs:
        argv = ["/bin/sh", "-c", _JOIN_CGROUPS, "sh", *map(str, options.cgroup_procs), "--", *argv]
    if options.die_with_server and _SETPRIV is not None:
        argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    return argv


@dataclass(frozen=True)
class SpawnOptions:
    """How to start one host process."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None = None
    cgroup_procs: Sequence[Path] = ()
    """`cgroup.procs` files the child joins before the command runs."""
    new_session: bool = True
    """Own session and process group, so the whole group can be signalled."""
    stdin: bool = False
    pass_fds: Sequence[int] = ()
    die_with_server: bool = True


class ChildProcess:
    """A started host process with non-blocking pipes and a pidfd."""

    def __init__(self, popen: subprocess.Popen[bytes], new_session: bool) -> None:
        self._popen = popen
        self._new_session = new_session
        self._pidfd = os.pidfd_open(popen.pid)
        # a command's stream and its sandbox's end may both wait for it: one reads the pidfd
        self._reaping = anyio.Lock()
        for stream in (popen.stdout, popen.stderr, popen.stdin):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)

    @property
    def pid(self) -> int:
        """The host pid."""
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal)."""
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait for the process to exit and reap it (any number of tasks may wait)."""
        async with self._reaping:
            if self._popen.returncode is None:
                await anyio.wait_readable(self._pidfd)
                self._popen.wait()
        return self._popen.returncode

    def signal(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process (its whole group when it leads a session)."""
        if self._popen.returncode is not None:
            return
        try:
            if self._new_session:
                os.killpg(self._popen.pid, sig)
            else:
                os.kill(self._popen.pid, sig)
        except ProcessLookupError:
            pass

    async def chunks(self, stream: str) -> AsyncIterator[bytes]:
        """Yield output of `stream` ("stdout" or "stderr") until end of file."""
        pipe = self._popen.stdout if stream == "stdout" else self._popen.stderr
        if pipe is None:
            return
        fd = pipe.fileno()
        while True:
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                try:
                    await anyio.wait_readable(fd)
                except anyio.ClosedResourceError:
                    return  # the process was closed while its output was being read
                continue
            if not data:
                return
            yield data

    async def write_stdin(self, data: bytes) -> None:
        """Write all of `data` to the process's stdin."""
        stdin = self._popen.stdin
        assert stdin is not None, "process started without stdin"
        view = memoryview(data)
        while view:
            if stdin.closed:
                raise BrokenPipeError("stdin was closed")
            try:
                written = os.write(stdin.fileno(), view)
            except BlockingIOError:
                with contextlib.suppress(anyio.ClosedResourceError):
                    await anyio.wait_writable(stdin.fileno())
                continue
            view = view[written:]

    def close_stdin(self) -> None:
        """Close stdin, so the process reads end of file."""
        _close_stream(self._popen.stdin)

    def close(self) -> None:
        """Release the pipes and the pidfd (the process must have been reaped or killed)."""
        # wake whoever still waits on a descriptor: closing one under a waiter leaves the event
        # loop watching a number the next descriptor reuses, which then never wakes anyone
        for stream in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            _close_stream(stream)
        if self._pidfd >= 0:
            anyio.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1


def _close_stream(stream: IO[bytes] | None) -> None:
    if stream is not None and not stream.closed:
        anyio.notify_closing(stream.fileno())
        stream.close()


def spawn(options: SpawnOptions) -> ChildProcess:
    """Start a host process (fork and exec happen on the calling thread)."""
    pipe = subprocess.PIPE
    hook = _pdeathsig_hook() if options.die_with_server and _SETPRIV is None else None
    popen = subprocess.Popen(
        _wrapped_argv(options),
        stdin=pipe if options.stdin else subprocess.DEVNULL,
        stdout=pipe,
        stderr=pipe,
        cwd=options.cwd,
        env=dict(options.env),
        start_new_session=options.new_session,
        pass_fds=tuple(options.pass_fds),
        preexec_fn=hook,
    )
    return ChildProcess(popen, options.new_session)
