"""Child processes on anyio: host processes, and commands that a sandbox's PID 1 starts.

Both have non-blocking pipes for stdin, stdout and stderr; they differ in how they are waited
for and signalled. A host process is the server's child, waited for on a pidfd. A sandbox's
command is PID 1's child: PID 1 reports its pid and exit status on a status pipe and signals
its process group on request (see `sandboxes/_init.py`). Everything waits on descriptors, so
asyncio and trio both work.

A host process that must join cgroups and die with the server (PR_SET_PDEATHSIG) could do
both from a Python pre-exec hook, but that makes `subprocess` fork the whole server instead
of using vfork, and blocks the event loop until the child has joined its cgroups (a cgroup
move waits for an RCU grace period): some 15-20 ms per process, one at a time. So the child
does it after exec, as `setpriv --pdeathsig` and a few lines of `/bin/sh`, and the server only
pays for a vfork.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from ._terminal import Terminal, TerminalSize, resize, take_controlling_terminal

_PR_SET_PDEATHSIG = 1
_READ_CHUNK = 65536
_SETPRIV = shutil.which("setpriv")
# argv: cgroup.procs files, "--", the command; the shell moves itself, then execs the command
_JOIN_CGROUPS = (
    'while [ "$1" != -- ]; do echo 0 > "$1" || { echo "cannot join cgroup $1" >&2; exit 125; }; '
    'shift; done; shift; exec "$@"'
)


def _close(fd: int) -> None:
    """Close a descriptor others may wait on: a waiter left watching a closed number would
    watch whatever descriptor reuses it next, and never wake."""
    anyio.notify_closing(fd)
    os.close(fd)


class ChildProcess:
    """A started process with non-blocking pipes (stdin only when asked for)."""

    def __init__(self, stdio: Stdio) -> None:
        stdin, stdout, stderr = stdio.ours
        self._fds: dict[str, int | None] = {"stdin": stdin, "stdout": stdout, "stderr": stderr}
        self._with_stdin = stdin is not None
        self.terminal = stdio.terminal
        """Whether its stdin and stdout are a terminal (stdout then carries all its output)."""
        for fd in self._fds.values():
            if fd is not None:
                os.set_blocking(fd, False)
        # a command's stream and its sandbox's end may both wait for it: one of them reads
        self._waiting = anyio.Lock()
        self._returncode: int | None = None

    @property
    def pid(self) -> int:
        """The pid (a sandbox's command: as seen inside the sandbox)."""
        raise NotImplementedError

    @property
    def returncode(self) -> int | None:
        """The exit status once waited for (negative: killed by that signal)."""
        return self._returncode

    async def wait(self) -> int:
        """Wait for the process to exit (any number of tasks may wait)."""
        async with self._waiting:
            if self._returncode is None:
                self._returncode = await self._exit_status()
        return self._returncode

    async def _exit_status(self) -> int:
        raise NotImplementedError

    def signal(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process's whole group (it leads a session of its own)."""
        raise NotImplementedError

    async def chunks(self, stream: str) -> AsyncIterator[bytes]:
        """Yield output of `stream` ("stdout" or "stderr") until end of file."""
        while (fd := self._fds[stream]) is not None:
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                try:
                    await anyio.wait_readable(fd)
                except anyio.ClosedResourceError:
                    return  # the process was closed while its output was being read
                continue
            except OSError as ex:
                if ex.errno == errno.EIO:  # a terminal whose every command end is closed
                    return
                raise
            if not data:
                return
            yield data

    async def write_stdin(self, data: bytes) -> None:
        """Write all of `data` to the process's stdin."""
        assert self._with_stdin, "process started without stdin"
        view = memoryview(data)
        while view:
            fd = self._fds["stdin"]
            if fd is None:
                raise BrokenPipeError("stdin was closed")
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                with contextlib.suppress(anyio.ClosedResourceError):
                    await anyio.wait_writable(fd)
                continue
            view = view[written:]

    def close_stdin(self) -> None:
        """Close stdin, so the process reads end of file."""
        self._release("stdin")

    def resize(self, size: TerminalSize) -> None:
        """Resize the process's terminal (ValueError if it has none; nothing once closed)."""
        if not self.terminal:
            raise ValueError(f"process {self.pid} has no terminal")
        if (fd := self._fds["stdout"]) is not None:
            resize(fd, size)

    def _release(self, name: str) -> None:
        fd = self._fds[name]
        if fd is not None:
            self._fds[name] = None
            _close(fd)

    def close(self) -> None:
        """Release the pipes (the process must have exited or been killed)."""
        for name in self._fds:
            self._release(name)


class HostProcess(ChildProcess):
    """A process of the host, the server's child, waited for on a pidfd."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        new_session: bool,
        stdio: Stdio,
    ) -> None:
        super().__init__(stdio)
        self._popen = popen
        self._new_session = new_session
        self._pidfd = os.pidfd_open(popen.pid)

    @property
    def pid(self) -> int:
        """The host pid."""
        return self._popen.pid

    async def _exit_status(self) -> int:
        await anyio.wait_readable(self._pidfd)
        return self._popen.wait()

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

    def close(self) -> None:
        """Release the pipes and the pidfd."""
        super().close()
        if self._pidfd >= 0:
            _close(self._pidfd)
            self._pidfd = -1


class SandboxProcess(ChildProcess):
    """A command started by a sandbox's PID 1, which reports on the status pipe `status`."""

    def __init__(
        self,
        status: int,
        stdio: Stdio,
        signal_group: Callable[[int, int], None],
    ) -> None:
        super().__init__(stdio)
        self._status = _Lines(status)
        self._signal_group = signal_group
        self._pid = 0

    @property
    def pid(self) -> int:
        """The pid inside the sandbox."""
        return self._pid

    async def started(self) -> None:
        """Wait until PID 1 has started the command (RuntimeError: why it has not)."""
        line = await self._status.line()
        if not line.startswith("pid "):
            raise RuntimeError(line.removeprefix("error: ") or "the sandbox ended")
        self._pid = int(line.removeprefix("pid "))

    async def _exit_status(self) -> int:
        line = await self._status.line()
        # end of file: PID 1 died, and the whole sandbox with it
        return int(line.removeprefix("exit ")) if line else -signal.SIGKILL

    def signal(self, sig: int = signal.SIGKILL) -> None:
        """Signal the command's process group, through PID 1, while it runs."""
        if self._returncode is None and self._pid:
            self._signal_group(self._pid, sig)

    def close(self) -> None:
        """Release the pipes and the status pipe."""
        super().close()
        self._status.close()


class _Lines:
    """The lines written on a pipe."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        os.set_blocking(fd, False)

    async def line(self) -> str:
        """The next line, stripped ("" at end of file or once closed)."""
        while b"\n" not in self._buffer:
            if self._fd < 0:
                return ""
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                with contextlib.suppress(anyio.ClosedResourceError):
                    await anyio.wait_readable(self._fd)
                continue
            if not data:
                return ""
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").strip()

    def close(self) -> None:
        """Close the pipe."""
        if self._fd >= 0:
            _close(self._fd)
            self._fd = -1


@dataclass(frozen=True)
class Stdio:
    """A new process's stdin, stdout and stderr: the server's ends and the process's."""

    ours: tuple[int | None, int, int | None]
    """stdin (None: not asked for), stdout, stderr (None: a terminal carries it)."""
    theirs: tuple[int, int, int] | tuple[int, int]
    """The process's stdout, stderr and stdin (without one: its stdin is empty)."""
    terminal: bool = False

    @classmethod
    def of(cls, stdin: bool, terminal: Terminal | None) -> Stdio:
        """The terminal's, if there is one, else pipes."""
        return cls.pipes(stdin) if terminal is None else cls.of_terminal(terminal)

    @classmethod
    def pipes(cls, stdin: bool) -> Stdio:
        """A pipe for each stream (stdin only when asked for)."""
        out, err = os.pipe(), os.pipe()
        if not stdin:
            return cls((None, out[0], err[0]), (out[1], err[1]))
        into = os.pipe()
        return cls((into[1], out[0], err[0]), (out[1], err[1], into[0]))

    @classmethod
    def of_terminal(cls, terminal: Terminal) -> Stdio:
        """A terminal for all three: the process's end is its stdin, stdout and stderr."""
        device = terminal.device
        return cls((os.dup(terminal.controller), terminal.controller, None), (device,) * 3, True)

    def close_theirs(self) -> None:
        """Close the process's ends (it has them, or never will)."""
        for fd in set(self.theirs):
            os.close(fd)

    def close_ours(self) -> None:
        """Close the server's ends (the process did not start)."""
        for fd in self.ours:
            if fd is not None:
                os.close(fd)


def _pdeathsig_hook() -> Callable[[], None]:
    """Without setpriv: PR_SET_PDEATHSIG from a pre-exec hook (forks the whole server)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return hook


def _pre_exec(options: SpawnOptions) -> Callable[[], None] | None:
    """What the child does before exec, if anything: a hook makes `subprocess` fork the whole
    server, so only for what `setpriv` cannot do (dying with the server, without setpriv) and
    for a terminal's session taking it as its controlling terminal."""
    hooks = []
    if options.die_with_server and _SETPRIV is None:
        hooks.append(_pdeathsig_hook())
    if options.terminal is not None:
        hooks.append(take_controlling_terminal)
    if not hooks:
        return None

    def hook() -> None:
        for each in hooks:
            each()

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
    terminal: Terminal | None = None
    """A terminal for stdin, stdout and stderr (its session's controlling terminal)."""
    pass_fds: Sequence[int] = ()
    die_with_server: bool = True


def spawn(options: SpawnOptions) -> HostProcess:
    """Start a host process (fork and exec happen on the calling thread)."""
    terminal = options.terminal
    stdio = Stdio.of(options.stdin, terminal)
    new_session = options.new_session or terminal is not None
    out, err, *into = stdio.theirs
    try:
        popen = subprocess.Popen(
            _wrapped_argv(options),
            stdin=into[0] if into else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=options.cwd,
            env=dict(options.env),
            start_new_session=new_session,
            pass_fds=tuple(options.pass_fds),
            preexec_fn=_pre_exec(options),
        )
    except BaseException:
        stdio.close_ours()
        raise
    finally:
        stdio.close_theirs()
    return HostProcess(popen, new_session, stdio)
