"""Isolated sandboxes on this machine: create one, run processes in it, reach its files, end it.

Two modes. `namespaces` (Linux, root): a factory process (`_sandbox_init.py`) forks each
sandbox into new PID, mount, UTS, IPC and network namespaces; the sandbox's PID 1 mounts an
overlay over the host's root so writes stay private, and commands enter with `nsenter`. `process` (anything else): plain
processes in a private directory, no isolation, which every run reports. Both put a sandbox's
processes in its own cgroups when this machine allows it, for memory and pids limits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import anyio

from . import _files
from ._cgroups import Cgroups, Limits, SandboxCgroup
from ._forward import Forwarder
from ._process import ChildProcess, SpawnOptions, spawn

IsolationMode = Literal["namespaces", "process"]
NetworkMode = Literal["none", "host"]

_INIT = Path(__file__).with_name("_sandbox_init.py")
_BOOT_TIMEOUT = 30.0
_DEFAULT_MASKS = ("/root/.ssh", "/etc/ssh")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxError(RuntimeError):
    """A sandbox could not be created or used."""


@dataclass(frozen=True)
class IsolationConfig:
    """How this server isolates its sandboxes."""

    state_dir: Path
    mode: Literal["auto", "namespaces", "process"] = "auto"
    network: NetworkMode = "none"
    masks: tuple[str, ...] = ()
    shares: tuple[str, ...] = ()
    """Host directories mounted read-write at the same path in every sandbox."""
    forward: tuple[str, int] | None = None
    """The server's (host, port), forwarded from inside sandboxes on a loopback-only network."""


@dataclass(frozen=True)
class User:
    """A user inside a sandbox."""

    name: str
    uid: int
    gid: int
    home: str


ROOT = User("root", 0, 0, "/root")


def namespaces_supported() -> bool:
    """Whether this machine can make namespace sandboxes (Linux, root, util-linux)."""
    return (
        sys.platform == "linux"
        and os.geteuid() == 0
        and all(shutil.which(tool) for tool in ("unshare", "nsenter", "setpriv"))
    )


@dataclass
class Sandbox:
    """One isolated environment; subclasses say how processes enter it."""

    id: str
    dir: Path
    cgroup: SandboxCgroup
    limits: Limits
    _processes: set[ChildProcess] = field(default_factory=set)
    contained: ClassVar[bool] = False
    """Whether its processes die with its PID 1 (which dies with the server) on their own."""

    @property
    def root(self) -> str:
        """The host path of the sandbox's root directory."""
        raise NotImplementedError

    def _command(
        self, argv: Sequence[str], cwd: str, user: User
    ) -> tuple[list[str], str | None, dict[str, str]]:
        """The host command line, host working directory and extra variables for `argv`."""
        raise NotImplementedError

    def user(self, name: str) -> User:
        """Look `name` up in the sandbox's own /etc/passwd."""
        if name == "root":
            return ROOT
        passwd = _files.read_file(self.root, "/etc/passwd").decode(errors="replace")
        for line in passwd.splitlines():
            entry = line.split(":")
            if len(entry) >= 7 and entry[0] == name:
                return User(name, int(entry[2]), int(entry[3]), entry[5] or "/")
        raise SandboxError(f"no user {name!r} in sandbox {self.id}")

    def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        user: User = ROOT,
        stdin: bool = False,
    ) -> ChildProcess:
        """Start `argv` in the sandbox (its own process group) and return the process."""
        command, host_cwd, extra = self._command(argv, cwd or user.home, user)
        full_env = {"PATH": DEFAULT_PATH, "HOME": user.home, "USER": user.name, **env, **extra}
        process = spawn(
            SpawnOptions(
                argv=command,
                env=full_env,
                cwd=host_cwd,
                cgroup_procs=self.cgroup.procs_files,
                stdin=stdin,
                die_with_server=not self.contained,
            )
        )
        self._processes.add(process)
        return process

    def forget(self, process: ChildProcess) -> None:
        """Drop a finished process from the sandbox's bookkeeping."""
        self._processes.discard(process)
        process.close()

    def read_file(self, path: str, limit: int | None = None) -> bytes:
        """Read a file of the sandbox (absolute path as seen inside)."""
        return _files.read_file(self.root, path, limit)

    def write_file(self, path: str, data: bytes, user: User = ROOT) -> None:
        """Write a file of the sandbox, owned by `user`."""
        owner = None if user.uid == 0 else (user.uid, user.gid)
        _files.write_file(self.root, path, data, owner)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the sandbox for memory."""
        return self.cgroup.oom_kills() > 0

    def kill_processes(self) -> None:
        """SIGKILL every process started in the sandbox."""
        self.cgroup.kill_all()
        for process in list(self._processes):
            process.signal(signal.SIGKILL)

    async def close(self) -> None:
        """End the sandbox: kill everything in it and remove its files and cgroups."""
        with anyio.CancelScope(shield=True):
            self.kill_processes()
            for process in list(self._processes):
                await process.wait()
                self.forget(process)
            await _remove_cgroup(self.cgroup)
            await anyio.to_thread.run_sync(shutil.rmtree, self.dir, True)


async def _remove_cgroup(cgroup: SandboxCgroup) -> None:
    # a killed process leaves its cgroup a moment after it is reaped
    for _ in range(100):
        if cgroup.remove():
            return
        cgroup.kill_all()
        await anyio.sleep(0.02)


@dataclass
class NamespaceSandbox(Sandbox):
    """A sandbox in its own namespaces, on an overlay of the host's root."""

    contained: ClassVar[bool] = True

    init_pid: int = 0
    init_fd: int = -1
    """A pidfd of PID 1: signalled and watched without risk of a reused pid."""
    forwarder: Forwarder | None = None

    @property
    def root(self) -> str:
        """The sandbox's root, reached through its PID 1."""
        return f"/proc/{self.init_pid}/root"

    def _command(
        self, argv: Sequence[str], cwd: str, user: User
    ) -> tuple[list[str], str | None, dict[str, str]]:
        enter = ["nsenter", "-t", str(self.init_pid), "-m", "-u", "-i", "-n", "-p", "-r"]
        if user.uid != 0:
            enter += ["--", "setpriv", f"--reuid={user.uid}", f"--regid={user.gid}"]
            enter.append("--init-groups")
        # nsenter's --wd opens its directory before entering the root: change it inside
        return [*enter, "--", "env", "-C", cwd, "--", *argv], None, {}

    def kill_processes(self) -> None:
        """Kill PID 1, which ends the PID namespace and everything in it."""
        if self.init_fd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.init_fd, signal.SIGKILL)
        super().kill_processes()

    async def close(self) -> None:
        """End the sandbox once its PID 1 is gone."""
        with anyio.CancelScope(shield=True):
            if self.forwarder is not None:
                self.forwarder.close()
            if self.init_fd >= 0:
                self.kill_processes()
                await anyio.wait_readable(self.init_fd)
                os.close(self.init_fd)
                self.init_fd = -1
            await super().close()


@dataclass
class ProcessSandbox(Sandbox):
    """The weaker mode: plain processes in a private directory, absolute paths rebased."""

    @property
    def root(self) -> str:
        """The private directory that stands in for the sandbox's root."""
        return str(self.dir / "root")

    def _command(
        self, argv: Sequence[str], cwd: str, user: User
    ) -> tuple[list[str], str | None, dict[str, str]]:
        host_cwd = Path(self.root + cwd)
        host_cwd.mkdir(parents=True, exist_ok=True)
        extra = {"HOME": self.root + user.home, "MARITIME_SANDBOX_ROOT": self.root}
        return list(argv), str(host_cwd), extra

    def user(self, name: str) -> User:
        """Every user is the server's own user here, with a private home."""
        home = "/root" if name == "root" else f"/home/{name}"
        return User(name, os.geteuid(), os.getegid(), home)


class SandboxHost:
    """Makes the sandboxes of one server, in the best mode this machine allows."""

    def __init__(self, config: IsolationConfig) -> None:
        self.config = config
        if config.mode == "namespaces" and not namespaces_supported():
            raise SandboxError(
                "isolation='namespaces' needs Linux, root and util-linux (unshare, nsenter, "
                "setpriv); run as root or use --isolation process"
            )
        supported = namespaces_supported()
        self.mode: IsolationMode = (
            "namespaces"
            if config.mode == "namespaces" or (config.mode == "auto" and supported)
            else "process"
        )
        digest = hashlib.sha1(str(config.state_dir.resolve()).encode()).hexdigest()[:10]
        self.cgroups = Cgroups.detect(f"inspect-swarm-{digest}")
        self.sandbox_dir = config.state_dir.resolve() / "sbx"
        self._factory = _Factory(self.sandbox_dir)

    def describe(self) -> dict[str, object]:
        """The isolation this server gives, as reported by the API."""
        if self.mode == "namespaces":
            note = (
                "namespaces (pid, mount, uts, ipc"
                + (", net: loopback only" if self.config.network == "none" else "; host network")
                + f"), overlay root, cgroups {self.cgroups.mode}"
            )
        else:
            note = (
                "WEAKER ISOLATION: plain processes in private directories (no namespaces, "
                "absolute file paths rebased into the sandbox's directory, "
                + (
                    "no memory limits"
                    if self.cgroups.mode == "none"
                    else f"cgroups {self.cgroups.mode}"
                )
                + "); run the server as root on Linux for isolated sandboxes"
            )
        return {"mode": self.mode, "cgroups": self.cgroups.mode, "note": note}

    async def aclose(self) -> None:
        """Stop making sandboxes: ends every namespace sandbox still running."""
        with anyio.CancelScope(shield=True):
            await self._factory.stop()

    def reap_leftovers(self) -> None:
        """Remove what sandboxes of an earlier run of this server left behind."""
        for cgroup in self.cgroups.leftovers():
            cgroup.kill_all()
            cgroup.remove()
        shutil.rmtree(self.sandbox_dir, ignore_errors=True)
        self.sandbox_dir.mkdir(parents=True, exist_ok=True)

    async def create(self, sandbox_id: str, limits: Limits) -> Sandbox:
        """Boot a fresh sandbox (raises SandboxError with the reason when it cannot)."""
        directory = self.sandbox_dir / sandbox_id
        directory.mkdir(parents=True)
        cgroup = self.cgroups.create(sandbox_id, limits)
        sandbox: Sandbox
        if self.mode == "process":
            sandbox = ProcessSandbox(sandbox_id, directory, cgroup, limits)
            for home in ("root", "home/user"):
                (directory / "root" / home).mkdir(parents=True)
            return sandbox
        sandbox = NamespaceSandbox(sandbox_id, directory, cgroup, limits)
        try:
            await self._boot(sandbox)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def _boot(self, sandbox: NamespaceSandbox) -> None:
        for sub in ("up", "wd", "m"):
            (sandbox.dir / sub).mkdir()
        config = {
            "dir": str(sandbox.dir),
            "hostname": sandbox.id,
            "masks": [str(self.config.state_dir.resolve()), *_DEFAULT_MASKS, *self.config.masks],
            "shares": list(self.config.shares),
            "user": ["user", 1000],
            "loopback": self.config.network == "none",
            "cgroups": [str(p) for p in sandbox.cgroup.procs_files],
        }
        read, write = os.pipe()
        try:
            await self._factory.request(json.dumps(config).encode(), write)
        finally:
            os.close(write)
        status = await _answer(read, sandbox)
        if status != "ready":
            reason = status or "no answer from the sandbox's init"
            raise SandboxError(reason.removeprefix("error: "))
        forward = self.config.forward
        if forward is not None and self.config.network == "none":
            sandbox.forwarder = Forwarder(sandbox.init_pid, forward[1], forward)


class _Factory:
    """The process that forks every namespace sandbox of this server (`_sandbox_init.py`)."""

    def __init__(self, sandbox_dir: Path) -> None:
        self._sandbox_dir = sandbox_dir
        self._socket: socket.socket | None = None
        self._process: ChildProcess | None = None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            fd = theirs.fileno()
            self._process = spawn(
                SpawnOptions(
                    argv=[sys.executable, "-I", "-S", str(_INIT), str(self._sandbox_dir), str(fd)],
                    env={"PATH": DEFAULT_PATH},
                    pass_fds=(fd,),
                )
            )
        ours.setblocking(False)
        self._socket = ours
        return ours

    async def request(self, config: bytes, answer: int) -> None:
        """Ask for a sandbox, answered on the pipe `answer` (starting the factory if needed)."""
        for attempt in (1, 2):
            sock = self._socket or self._start()
            try:
                while True:
                    try:
                        socket.send_fds(sock, [config], [answer])
                        return
                    except BlockingIOError:
                        await anyio.wait_writable(sock)
            except (BrokenPipeError, ConnectionResetError):
                await self.stop()  # it died, killing its sandboxes: start a new one
                if attempt == 2:
                    raise

    async def stop(self) -> None:
        """Kill the factory (and so every sandbox it made), if it runs."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._process is not None:
            self._process.signal(signal.SIGKILL)
            await self._process.wait()
            self._process.close()
            self._process = None


async def _answer(read: int, sandbox: NamespaceSandbox) -> str:
    """Read a boot's answer: PID 1's `ready` (with its pid from the keeper), or the error."""
    status = ""
    with contextlib.closing(_Answer(read)) as answer, anyio.move_on_after(_BOOT_TIMEOUT):
        # the keeper's `pid` line and PID 1's own may come in either order
        while status in ("", "ready") and not (status and sandbox.init_fd >= 0):
            line = await answer.line()
            if not line:
                return ""
            if line.startswith("pid "):
                sandbox.init_pid = int(line.removeprefix("pid "))
                sandbox.init_fd = os.pidfd_open(sandbox.init_pid)
            else:
                status = line
    return status


class _Answer:
    """The lines a sandbox's boot writes on its answer pipe."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        os.set_blocking(fd, False)

    async def line(self) -> str:
        """The next line, stripped ("" at end of file)."""
        while b"\n" not in self._buffer:
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not data:
                return ""
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").strip()

    def close(self) -> None:
        """Close the pipe."""
        os.close(self._fd)
