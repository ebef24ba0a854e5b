"""Isolated sandboxes on this machine: create one, run processes in it, reach its files, end it.

Two modes. `namespaces` (Linux, root): a factory process (`sandboxes/_init.py`) forks each
sandbox's PID 1 into new PID, mount, UTS, IPC, cgroup and network namespaces; PID 1 builds a
root of what the host allows it (`SYSTEM_DIRS`, part of /etc, what the server exposes and
shares) with writable layers on a disk of the quota's size, starts the sandbox's commands
when asked on its control socket, and makes the sandbox anew for a run's next command
(`reset`). The server reaches a sandbox's files as a process of the sandbox would
(`sandboxes._files.run_as`). `process` (anything else): plain processes in a private directory, no
isolation, which every run reports. Both put a sandbox's processes in its own cgroups when
this machine allows it, for memory and pids limits.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import errno
import fcntl
import functools
import hashlib
import marshal
import os
import select
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

import anyio

from .._defaults import DISK_GIB, NETWORK_RANGE, NetworkMode
from . import _files as _sandbox_files
from ._cgroups import Cgroups, Limits, SandboxCgroup, Usage, default_pids_cap
from ._child_process import ChildProcess, HostProcess, SandboxProcess, SpawnOptions, Stdio, spawn
from ._disks import Disk, DiskError, DiskPool
from ._forward import MAX_CONNECTIONS, Forwarder
from ._init import KEPT_CAPABILITIES
from ._network import Gateway, Link, NetworkError, Outbound, parse_range
from ._ports import dial
from ._snapshots import (
    LAYERS,
    SCRATCH,
    Files,
    SnapshotTooLarge,
    copy_tree,
    open_scratch,
    snapshot_files,
    tree_bytes,
)
from ._terminal import Terminal, TerminalSize, open_in_root, open_on_host
from ._watch import DirectoryWatch

IsolationMode = Literal["namespaces", "process"]

T = TypeVar("T")

_INIT = Path(__file__).with_name("_init.py")
_BOOT_TIMEOUT = 30.0
GIB = 1024**3
DISK_BYTES = DISK_GIB * GIB
"""Each sandbox's disk, unless told otherwise."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
"""The host's directories every sandbox has, under a writable layer of its own (a link among
them, as merged-/usr systems have, is a link in the sandbox too)."""
ETC_ENTRIES = (
    # accounts (with the sandbox's `user` added; shadow files of the sandbox's own), shells,
    # logins and the tools that manage accounts
    *("passwd", "group", "subuid", "subgid", "shells", "login.defs", "skel", "default"),
    *("adduser.conf", "deluser.conf", "pam.conf", "pam.d", "security"),
    *("profile", "profile.d", "bash.bashrc", "bashrc", "environment", "inputrc"),
    # names and the network
    *("hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf", "networks"),
    *("protocols", "services", "ethertypes", "rpc"),
    # the dynamic linker, alternatives, certificates
    *("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives"),
    *("ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies"),
    # locale, time, the system's release
    *("locale.alias", "locale.conf", "locale.gen", "localtime", "timezone"),
    *("os-release", "lsb-release", "debian_version", "alpine-release", "fedora-release"),
    *("redhat-release", "system-release"),
    # configuration that programs' own files in /usr lead to
    *("python3*", "perl", "java-*", "fonts", "mime.types", "magic", "magic.mime"),
    *("mailcap", "terminfo", "mtab"),
)
"""What sandboxes have of the host's /etc (`name*` matches by prefix), and of that only
what every user of the host may read: never the host's shadow files (a sandbox's have every
password locked), keys, or the machine's own configuration."""
_USER = ("user", 1000)
"""The account every sandbox has besides root (the uid, or the next free one)."""
_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxError(RuntimeError):
    """A sandbox could not be created or used."""


@dataclass(frozen=True)
class IsolationConfig:
    """How this server isolates its sandboxes."""

    state_dir: Path
    mode: Literal["auto", "namespaces", "process"] = "auto"
    network: NetworkMode = "none"
    network_range: str = NETWORK_RANGE
    """Where sandboxes' addresses come from when their network is routed out (`nat`)."""
    masks: tuple[str, ...] = ()
    shares: tuple[str, ...] = ()
    """Host directories mounted read-write at the same path in every sandbox."""
    forward: tuple[str, int] | None = None
    """The server's (host, port), forwarded from inside sandboxes with a network of their
    own."""
    forward_limit: int = MAX_CONNECTIONS
    """The most connections one sandbox may have open through the forwarder."""
    exposes: tuple[tuple[str, str], ...] = ()
    """Host paths (resolved) mounted read-only in every sandbox, besides `SYSTEM_DIRS` and
    `ETC_ENTRIES`: (host path, path in the sandbox)."""
    disk_bytes: int = DISK_BYTES
    """Each sandbox's disk: what its writable layers may hold (0: no quota)."""
    pids: int | None = None
    """The most processes of all sandboxes at once (None: `default_pids_cap`)."""
    snapshot_dir: Path | None = None
    """Where snapshots of sandboxes are kept (None: `snapshots` in `state_dir`)."""


@dataclass(frozen=True)
class User:
    """A user inside a sandbox."""

    name: str
    uid: int
    gid: int
    home: str


ROOT = User("root", 0, 0, "/root")


def namespaces_supported() -> bool:
    """Whether this machine can make namespace sandboxes (Linux, root)."""
    return sys.platform == "linux" and os.geteuid() == 0


@dataclass(frozen=True)
class Launch:
    """A command to start in a sandbox, as `Sandbox.exec` completed it."""

    argv: Sequence[str]
    env: dict[str, str]
    cwd: str
    user: User
    stdin: bool
    terminal: TerminalSize | None
    """The size of the terminal to open for it (its stdin, stdout and stderr), or None:
    pipes."""


@dataclass
class Sandbox:
    """One isolated environment; subclasses say how processes start in it."""

    id: str
    dir: Path
    cgroups: Cgroups
    cgroup: SandboxCgroup
    limits: Limits
    _processes: set[ChildProcess] = field(default_factory=set)
    reusable = False
    """Whether `reset` can make this sandbox into a fresh one."""
    node: ClassVar[str | None] = None
    """The node it is on: none, this machine's sandboxes being on the server's."""

    @property
    def root(self) -> str:
        """The host path of the sandbox's root directory."""
        raise NotImplementedError

    async def reset(self, sandbox_id: str) -> None:
        """Make this sandbox into a fresh one named `sandbox_id`, for the next command of a run
        (raises SandboxError when it cannot: end it and create one instead)."""
        raise SandboxError(f"sandbox {self.id} cannot be made anew")

    async def _start(self, launch: Launch) -> ChildProcess:
        raise NotImplementedError

    def user(self, name: str) -> User:
        """Look `name` up in the sandbox's own /etc/passwd."""
        if name == "root":
            return ROOT
        passwd = self.read_file("/etc/passwd").decode(errors="replace")
        for line in passwd.splitlines():
            entry = line.split(":")
            if len(entry) >= 7 and entry[0] == name:
                return User(name, int(entry[2]), int(entry[3]), entry[5] or "/")
        raise SandboxError(f"no user {name!r} in sandbox {self.id}")

    async def exec(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None = None,
        user: User = ROOT,
        stdin: bool = False,
        terminal: TerminalSize | None = None,
    ) -> ChildProcess:
        """Start `argv` in the sandbox (its own session) and return the process; with a
        `terminal` of that size, that terminal is its stdin, stdout, stderr and controlling
        terminal.

        Raises SandboxError when the sandbox has ended. A program or directory that does not
        exist is the process's failure, as in a shell: exit status 127, 126 or 125 and why.
        """
        full_env = {"PATH": DEFAULT_PATH, "HOME": user.home, "USER": user.name, **env}
        launch = Launch(argv, full_env, cwd or user.home, user, stdin, terminal)
        process = await self._start(launch)
        self._processes.add(process)
        return process

    async def watch(self, user: User, path: str, recursive: bool) -> DirectoryWatch:
        """Watch a directory of the sandbox (and those below it if `recursive`) with what
        `user` may read; OSError (as a file call's) if it cannot."""
        watch = DirectoryWatch(functools.partial(self.as_user, user), path, recursive)
        try:
            await watch.start()
        except BaseException:
            watch.close()
            raise
        return watch

    def dial(self, port: int) -> socket.socket:
        """A TCP connection to `port` on the sandbox's own loopback; blocks.

        SandboxError when the sandbox's network is the host's (its ports are the host's, which
        the server never forwards); ConnectionRefusedError when nothing listens there."""
        raise SandboxError(
            f"sandbox {self.id} shares the host's network, so its ports are the host's: "
            "the server forwards ports only of sandboxes with a network of their own"
        )

    async def ended(self) -> None:
        """Wait until the sandbox ends on its own (in this mode it never does)."""
        await anyio.sleep_forever()

    def forget(self, process: ChildProcess) -> None:
        """Drop a finished process from the sandbox's bookkeeping."""
        self._processes.discard(process)
        process.close()

    def as_user(self, user: User, operation: Callable[[str], T]) -> T:
        """`operation(root)` on the sandbox's files (`root`: its root directory) with what
        `user` may do in the sandbox; blocks until it is done."""
        return operation(self.root)

    def read_file(self, path: str, limit: int | None = None) -> bytes:
        """Read a file of the sandbox (absolute path as seen inside) as its root."""
        return self.as_user(ROOT, lambda root: _sandbox_files.read_file(root, path, limit))

    def write_file(self, path: str, data: bytes, user: User = ROOT) -> None:
        """Write a file of the sandbox as `user`."""
        self.as_user(user, lambda root: _sandbox_files.write_file(root, path, data))

    def usage(self) -> Usage:
        """What the sandbox uses now (blocks: it reads the cgroups)."""
        return self.cgroup.usage()

    async def freeze(self, frozen: bool) -> None:
        """Freeze (or thaw) every process of the sandbox, memory kept (OSError where its
        cgroups have no freezer)."""
        await anyio.to_thread.run_sync(self.cgroup.freeze, frozen)

    async def save(self, snapshot_id: str, most: int) -> int:
        """Copy what the sandbox wrote (its disk's layers and its /tmp) aside on this machine
        as the snapshot `snapshot_id`, its processes frozen by the caller; the bytes the copy
        takes. SnapshotTooLarge, copying nothing, when that is more than `most`;
        SandboxError where sandboxes have no disk of their own."""
        raise SandboxError(self._no_disk())

    @contextlib.contextmanager
    def files(self) -> Iterator[Files]:
        """What the sandbox wrote, to copy while the block runs, its processes frozen by the
        caller (SandboxError where sandboxes have no disk of their own); blocks."""
        raise SandboxError(self._no_disk())
        yield  # a generator, as its overrides are

    def _no_disk(self) -> str:
        return (
            f"sandbox {self.id}: snapshots and forks are made of namespace sandboxes with a "
            "disk of their own (a server run as root on Linux, without --disk-gib 0)"
        )

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
            # cgroupfs and the file system take their time: never on the event loop
            await anyio.to_thread.run_sync(self._remove)

    def _remove(self) -> None:
        """Give the sandbox's cgroups back and remove its directory (blocks)."""
        _release_cgroup(self.cgroups, self.cgroup)
        shutil.rmtree(self.dir, ignore_errors=True)


def _spread_subdirectories(path: Path) -> None:
    """Have ext4 place each sandbox's directory in a block group of its own, if it can.

    Without a journal, ext4 will not reuse an inode deleted in the last minutes, and finds a
    free one by checking every such inode of the group in turn: sandboxes made and removed
    in one directory's group cost ever more to create. Marked as a top of a directory
    hierarchy (`chattr +T`), the directory's subdirectories are spread over the disk instead.
    """
    with contextlib.suppress(OSError):  # not ext4 (or the like): nothing to spread
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            flags = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, b"\0" * 4))[0]
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags | _FS_TOPDIR_FL))
        finally:
            os.close(fd)


def _memfd(data: bytes) -> int:
    """A memfd holding `data` (a spawn request: argv may be megabytes, too much for a message)."""
    fd = os.memfd_create("spawn", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return fd


def _release_cgroup(cgroups: Cgroups, cgroup: SandboxCgroup) -> None:
    if cgroups.recycle(cgroup):
        return
    # a killed process leaves its cgroup a moment after it is reaped
    for _ in range(100):
        if cgroup.remove():
            return
        cgroup.kill_all()
        time.sleep(0.02)


@dataclass
class NamespaceSandbox(Sandbox):
    """A sandbox in its own namespaces, on a root of what the host allows it."""

    init_pid: int = 0
    init_fd: int = -1
    """A pidfd of PID 1: signalled and watched without risk of a reused pid."""
    root_fd: int = -1
    """PID 1's root directory, opened once it is built."""
    layer_fd: int = -1
    """The directory of the root's layers (the sandbox's disk), from PID 1: where the layers
    a reset put aside are removed from."""
    disk: Path | None = None
    """The image of the sandbox's disk, removed when it ends."""
    disks: DiskPool | None = None
    """Where the sandbox's disk came from, which lets it go once the sandbox has ended."""
    snapshots: Path | None = None
    """Where this machine keeps snapshots, when its sandboxes have disks."""
    control: socket.socket | None = None
    """PID 1's control socket: it starts and signals commands, and ends with it."""
    loopback: bool = False
    """Whether it has a network namespace of its own (else it shares the host's)."""
    gateway: Gateway | None = None
    """The server's end of sandboxes' ways out, when their network is routed out."""
    outbound: Outbound | None = None
    """Where its way out leads (None: it has none, only its loopback)."""
    link: Link | None = None
    """Its way out, once made."""
    forwarder: Forwarder | None = None
    listener: socket.socket | None = None
    """A socket listening inside the sandbox, whose connections go to the server."""
    _sending: anyio.Lock = field(default_factory=anyio.Lock)
    _fds: threading.Lock = field(default_factory=threading.Lock)
    """Held while PID 1's, the root's or the layers' descriptor is used from or closed: file
    access runs on worker threads, and a number closed under it could be another sandbox's
    next."""
    reusable = True

    @property
    def root(self) -> str:
        """The sandbox's root while its PID 1 lives (ProcessLookupError once it has ended).

        Not `/proc/<pid>/root`: once PID 1 ends, its pid may be a host process's.
        """
        self._check_live()
        return f"/proc/self/fd/{self.root_fd}"

    def _check_live(self) -> None:
        """ProcessLookupError once PID 1 has ended."""
        if self.root_fd < 0 or self.init_fd < 0 or _ended(self.init_fd):
            raise ProcessLookupError(errno.ESRCH, f"sandbox {self.id} has ended")

    def as_user(self, user: User, operation: Callable[[str], T]) -> T:
        """`operation(root)` on a thread with the ids, groups and capabilities a process of
        `user` has in the sandbox (`sandboxes._files.run_as`)."""
        with self._fds:
            root_fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return _sandbox_files.run_as(
            root_fd, user.name, user.uid, user.gid, _kept_mask(), operation
        )

    def dial(self, port: int) -> socket.socket:
        """A TCP connection to `port` on the sandbox's own loopback (see `_ports`); blocks."""
        if not self.loopback:
            return super().dial(port)
        with self._fds:
            self._check_live()
            namespace = os.open(f"/proc/{self.init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            # opened before PID 1 ended, or its pid could have been a host process's
            self._check_live()
            return dial(namespace, port)
        finally:
            os.close(namespace)

    def _terminal(self, user: User, size: TerminalSize) -> Terminal:
        """A terminal of the sandbox's own devpts, opened as `user` (so it is theirs)."""
        return self.as_user(user, lambda root: open_in_root(root, size))

    async def _start(self, launch: Launch) -> ChildProcess:
        user, size = launch.user, launch.terminal
        request = {"argv": list(launch.argv), "env": launch.env, "cwd": launch.cwd}
        terminal = None
        if size is not None:
            terminal = await anyio.to_thread.run_sync(self._terminal, user, size)
        streams = Stdio.of(launch.stdin, terminal)
        if terminal is not None:
            # PID 1 opens it again by name in the command's new session: its controlling tty
            request["tty"] = terminal.path
        memfd = _memfd(
            marshal.dumps(request | {"user": user.name, "uid": user.uid, "gid": user.gid})
        )
        status = os.pipe()
        theirs = [memfd, status[1]]
        process = SandboxProcess(status[0], streams, self._signal)
        try:
            await self._send(b"spawn", [*theirs, *streams.theirs])
        except BaseException:
            process.close()
            raise
        finally:
            _close_all(theirs)
            streams.close_theirs()
        try:
            # PID 1 answers at once; a command it started must not be lost to a cancellation
            with anyio.CancelScope(shield=True):
                await process.started()
        except RuntimeError as ex:
            process.close()
            raise SandboxError(
                f"cannot start {launch.argv[0]!r} in sandbox {self.id}: {ex}"
            ) from None
        return process

    async def _send(self, message: bytes, fds: Sequence[int]) -> None:
        if self.control is not None:
            with contextlib.suppress(*_ENDED):
                await _send_fds(self.control, self._sending, message, fds)
                return
        raise SandboxError(f"sandbox {self.id} has ended")

    async def reset(self, sandbox_id: str) -> None:
        """Have PID 1 make the sandbox anew: every process ended, /tmp and /dev (and the
        root, if a command changed it) mounted anew, a new IPC namespace and hostname, a new
        network if the last one was used; its PID namespace and cgroups kept. A sandbox
        costs a fraction of a boot's CPU this way (see `_reset` in `sandboxes._init`)."""
        # the old root must go with its mount namespace: nothing of the server's may hold it
        with self._fds:
            self.root_fd = _closed(self.root_fd)
        await self._send(f"reset {sandbox_id}".encode(), [])
        with anyio.fail_after(_BOOT_TIMEOUT):
            message, fds = await _receive(self._control())
        handles = _ready(message, fds)
        for process in list(self._processes):
            await process.wait()  # PID 1 has reaped it
            self.forget(process)
        if "listener" in handles:
            self.listen(socket.socket(fileno=handles["listener"]))
        with self._fds:
            self.root_fd = _open_root(self.init_pid)
        await self.route_out()
        self.id = sandbox_id
        self.cgroup.count_from_now()
        # layers a command changed are left beside the new ones, to be removed here (before
        # the next command: their space on the disk is its)
        layers = f"/proc/self/fd/{self.layer_fd}"
        old = [entry.path for entry in os.scandir(layers) if ".old" in entry.name]
        if old:
            await anyio.to_thread.run_sync(_remove_trees, old)

    def usage(self) -> Usage:
        """What the sandbox uses now, its disk's bytes included (blocks)."""
        used = self.cgroup.usage()
        with self._fds:  # not a number closed meanwhile, maybe another's by now
            if self.layer_fd < 0:
                return used
            disk = os.statvfs(f"/proc/self/fd/{self.layer_fd}")
        total = disk.f_blocks * disk.f_frsize
        return dataclasses.replace(
            used, disk=total - disk.f_bfree * disk.f_frsize, disk_total=total
        )

    async def route_out(self) -> None:
        """Give the sandbox's network its way out, anew when PID 1 has made a new network
        (SandboxError when it cannot)."""
        if self.gateway is None or self.outbound is None:
            return
        with self._fds:
            self._check_live()
            namespace = os.open(f"/proc/{self.init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._check_live()  # opened before PID 1 ended: not another process's
            if self.link is not None and self.link.namespace == os.fstat(namespace).st_ino:
                return
            await self._unroute()
            self.link = await self.gateway.attach(namespace, self.outbound)
        except NetworkError as ex:
            raise SandboxError(f"cannot route sandbox {self.id} out: {ex}") from None
        finally:
            os.close(namespace)

    async def _unroute(self) -> None:
        link, self.link = self.link, None
        if link is not None and self.gateway is not None:
            await self.gateway.detach(link)

    async def save(self, snapshot_id: str, most: int) -> int:
        """Copy the sandbox's upper layers, as its disk holds them, and its /tmp into the
        snapshot `snapshot_id`, if they take at most `most` bytes; the bytes it takes."""
        if self.snapshots is None or self.disk is None:
            return await super().save(snapshot_id, most)
        return await anyio.to_thread.run_sync(self._save, self.snapshots / snapshot_id, most)

    def _save(self, target: Path, most: int) -> int:
        with self.files() as files:
            size = files.size()
            if size > most:
                raise SnapshotTooLarge(size)
            try:
                copy_tree(files.layers, str(target / LAYERS), files.fds)
                copy_tree(files.scratch, str(target / SCRATCH), files.fds)
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
        return tree_bytes(target)

    @contextlib.contextmanager
    def files(self) -> Iterator[Files]:
        """What the sandbox wrote (its disk's upper layers and its /tmp), through
        descriptors of their own while the block runs: the sandbox may end meanwhile."""
        if self.disk is None:
            raise SandboxError(self._no_disk())
        with self._fds:
            self._check_live()
            layers = os.dup(self.layer_fd)
            scratch = open_scratch(self.root_fd)
        try:
            yield Files(
                f"/proc/self/fd/{layers}/{LAYERS}", f"/proc/self/fd/{scratch}", (layers, scratch)
            )
        finally:
            os.close(layers)
            os.close(scratch)

    def fill_scratch(self, files: Files) -> None:
        """Copy the /tmp of `files` into the sandbox's, before it runs anything; blocks."""
        with self._fds:
            scratch = open_scratch(self.root_fd)
        try:
            target = f"/proc/self/fd/{scratch}"
            copy_tree(files.scratch, target, (*files.fds, scratch))
        finally:
            os.close(scratch)

    def _control(self) -> socket.socket:
        if self.control is None:
            raise SandboxError(f"sandbox {self.id} has ended")
        return self.control

    def listen(self, listener: socket.socket) -> None:
        """Forward the connections of `listener` (instead of the last one's) to the server."""
        assert self.forwarder is not None, "PID 1 listens only when the server forwards"
        if self.listener is not None:
            self.forwarder.remove(self.listener)
        self.listener = listener
        self.forwarder.add(listener)

    async def ended(self) -> None:
        """Wait until PID 1 ends, and the whole sandbox with it (not while closing it)."""
        await anyio.wait_readable(self.init_fd)

    def _signal(self, pid: int, sig: int) -> None:
        if self.control is None:
            return  # a sandbox that is ending takes its commands with it
        try:
            self.control.send(f"signal {pid} {sig}".encode())
        except BlockingIOError:
            # PID 1 is behind on its requests: signal the group from here, never drop it
            if not _ended(self.init_fd):
                _signal_group_from_host(self.init_pid, pid, sig)
        except OSError:
            pass  # ending

    def kill_processes(self) -> None:
        """Kill PID 1, which ends the PID namespace and everything in it."""
        if self.init_fd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.init_fd, signal.SIGKILL)

    async def close(self) -> None:
        """End the sandbox once its PID 1 is gone."""
        with anyio.CancelScope(shield=True):
            if self.init_fd >= 0:
                self.kill_processes()
                await anyio.to_thread.run_sync(self.cgroup.thaw)  # a paused sandbox's
                await anyio.wait_readable(self.init_fd)
            if self.control is not None:
                _close_socket(self.control)
                self.control = None
            # the last of the server's hold on the sandbox's namespaces and mounts: the
            # kernel tears them down as they are let go, which takes a while
            await anyio.to_thread.run_sync(self._let_go)
            await self._unroute()
            await super().close()

    def _let_go(self) -> None:
        """Let go of the sandbox's listener, PID 1, root and disk (blocks)."""
        if self.forwarder is not None and self.listener is not None:
            self.forwarder.remove(self.listener)
            self.listener = None
        with self._fds:
            self.init_fd = _closed(self.init_fd)
            self.root_fd = _closed(self.root_fd)
            layer, self.layer_fd = self.layer_fd, -1
        if self.disks is not None and layer >= 0:
            # the disk's last mount: PID 1 ended without waiting to unmount it, and
            # neither does this
            self.disks.let_go(layer)
        else:
            _closed(layer)
        if self.disk is not None:
            self.disk.unlink(missing_ok=True)  # its space goes with the last mount of it


@dataclass
class ProcessSandbox(Sandbox):
    """The weaker mode: plain processes in a private directory, absolute paths rebased."""

    @property
    def root(self) -> str:
        """The private directory that stands in for the sandbox's root."""
        return str(self.dir / "root")

    async def _start(self, launch: Launch) -> HostProcess:
        return self._spawn(launch)

    def _spawn(self, launch: Launch) -> HostProcess:
        host_cwd = Path(self.root + launch.cwd)
        host_cwd.mkdir(parents=True, exist_ok=True)
        env = launch.env | {
            "HOME": self.root + launch.user.home,
            "MARITIME_SANDBOX_ROOT": self.root,
        }
        procs = self.cgroup.procs_files
        # a terminal of the host's devpts (its processes are the server's user's)
        terminal = None if launch.terminal is None else open_on_host(launch.terminal)
        return spawn(
            SpawnOptions(
                launch.argv,
                env,
                str(host_cwd),
                procs,
                stdin=launch.stdin,
                terminal=terminal,
            )
        )

    def user(self, name: str) -> User:
        """Every user is the server's own user here, with a private home."""
        home = "/root" if name == "root" else f"/home/{name}"
        return User(name, os.geteuid(), os.getegid(), home)


@functools.cache
def _kept_mask() -> int:
    """The capabilities a root of a sandbox has: those it keeps that this server has."""
    with open("/proc/self/status") as status:
        permitted = next(int(line.split()[1], 16) for line in status if line.startswith("CapPrm"))
    return permitted & sum(1 << capability for capability in KEPT_CAPABILITIES)


def base_cgroup_name(state_dir: Path) -> str:
    """The name of the cgroups under which a server on `state_dir` puts its sandboxes'."""
    digest = hashlib.sha1(str(state_dir.resolve()).encode()).hexdigest()[:10]
    return f"inspect-swarm-{digest}"


_BOOTS_PER_CPU = 2
"""Sandboxes booting at once, per CPU. A boot is mostly the kernel's work (namespaces, mounts,
cgroups, a disk); 200 at once on 2 CPUs kept the server's requests waiting up to 100 ms for
one, and a few at a time boot a run as fast while polls stay under 10 ms
(`benchmarks/server_bench.py`)."""


OPEN = Outbound()
"""A way out to anywhere but what no sandbox reaches (`_network.BLOCKED`): runs' sandboxes'."""
_NETWORK_NOTES: dict[NetworkMode, str] = {
    "none": ", net: loopback only",
    "nat": ", net: own, routed out through the server (NAT) under its rules",
    "host": "; host network",
}


class SandboxHost:
    """Makes the sandboxes of one server, in the best mode this machine allows."""

    def __init__(self, config: IsolationConfig) -> None:
        self.config = config
        self._booting = anyio.CapacityLimiter(_BOOTS_PER_CPU * (os.cpu_count() or 1))
        if config.mode == "namespaces" and not namespaces_supported():
            raise SandboxError(
                "isolation='namespaces' needs Linux and root; run as root or use "
                "--isolation process"
            )
        supported = namespaces_supported()
        self.mode: IsolationMode = (
            "namespaces"
            if config.mode == "namespaces" or (config.mode == "auto" and supported)
            else "process"
        )
        self.cgroups = Cgroups.detect(base_cgroup_name(config.state_dir))
        self.pids = config.pids or default_pids_cap()
        """The most processes of all sandboxes at once (their base cgroup's limit)."""
        self.cgroups.cap_pids(self.pids)
        state_dir = config.state_dir.resolve()
        self.sandbox_dir = state_dir / "sbx"
        self._forwarder = (
            None if config.forward is None else Forwarder(config.forward, config.forward_limit)
        )
        self._gateway = self._make_gateway() if config.network == "nat" else None
        self._disks: DiskPool | None = None
        if self.mode == "namespaces" and config.disk_bytes:
            search = os.pathsep.join([os.environ.get("PATH", ""), DEFAULT_PATH])
            try:
                self._disks = DiskPool(state_dir / "disks", config.disk_bytes, search)
            except DiskError as ex:
                raise SandboxError(ex.strerror) from None
        self.snapshot_dir = config.snapshot_dir or state_dir / "snapshots"
        """Where the snapshots of this machine's sandboxes are kept: the server's alone, as
        what a sandbox made world-writable (its /tmp) stays so in its copy."""
        self.snapshot_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.snapshot_dir.chmod(0o700)
        settings = {
            "base": str(state_dir / "base"),
            "tools": str(state_dir / "tools"),
            "user": _USER[0],
            "uid": _USER[1],
            "system": list(SYSTEM_DIRS),
            "etc": list(ETC_ENTRIES),
            "mounts": [*config.exposes, *((path, path) for path in config.shares)],
            "exposes": list(config.exposes),
        }
        self._factory = _Factory([str(self.sandbox_dir), marshal.dumps(settings).hex()])

    def _make_gateway(self) -> Gateway:
        if self.mode != "namespaces":
            raise SandboxError(
                "--network nat routes sandboxes' own network namespaces out: it needs "
                "namespace isolation (Linux, as root); leave --network at none"
            )
        try:
            network = parse_range(self.config.network_range)
        except ValueError as ex:
            raise SandboxError(str(ex)) from None
        return Gateway(network, str(self.config.state_dir.resolve()))

    def forwarded(self, peer: tuple[str, int]) -> bool:
        """Whether a connection to the server from `peer` is a sandbox's, forwarded."""
        return self._forwarder is not None and self._forwarder.forwarded(peer)

    def describe(self) -> dict[str, object]:
        """The isolation this server gives, as reported by the API."""
        if self.mode == "namespaces":
            note = (
                "namespaces (pid, mount, uts, ipc, cgroup"
                + _NETWORK_NOTES[self.config.network]
                + "), a root of the host's system directories only, seccomp as Docker's default"
                + f", cgroups {self.cgroups.mode}"
                + (
                    f", disk {self.config.disk_bytes / GIB:g} GiB each"
                    if self.config.disk_bytes
                    else ", no disk quota"
                )
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
            if self._disks is not None:
                await anyio.to_thread.run_sync(self._disks.close)
            if self._gateway is not None:
                await self._gateway.close()
        if self._forwarder is not None:
            self._forwarder.close()

    def reap_leftovers(self) -> None:
        """Remove what sandboxes of an earlier run of this server, and killed servers, left."""
        self.cgroups.remove_all()
        self.cgroups.sweep()
        shutil.rmtree(self.sandbox_dir, ignore_errors=True)
        self.sandbox_dir.mkdir(parents=True, exist_ok=True)
        _spread_subdirectories(self.sandbox_dir)
        if self._gateway is not None:
            try:
                self._gateway.open()
            except NetworkError as ex:  # the command line's error, as an OSError
                raise NetworkError(f"--network nat: {ex}") from None

    async def create(
        self,
        sandbox_id: str,
        limits: Limits,
        origin: str | Sandbox | None = None,
        outbound: Outbound | None = OPEN,
    ) -> Sandbox:
        """Boot a fresh sandbox, or one with the files of `origin`: a snapshot of this
        machine (its id), or a sandbox's as they are now (its processes frozen by the
        caller: a fork, copied once), once fewer than the most boot at once (raises
        SandboxError with the reason when it cannot); routed out under `outbound` when the
        network is `nat` (None: loopback only)."""
        async with self._booting:
            with self._files(origin) as files:
                sandbox = await self._create(sandbox_id, limits, files)
            if isinstance(sandbox, NamespaceSandbox) and self._gateway is not None:
                await self._route_out(sandbox, outbound)
            return sandbox

    async def _route_out(self, sandbox: NamespaceSandbox, outbound: Outbound | None) -> None:
        """Give a sandbox just booted its way out (kept for the new network of a reset)."""
        sandbox.gateway, sandbox.outbound = self._gateway, outbound
        try:
            await sandbox.route_out()
        except BaseException:
            await sandbox.close()
            raise

    @contextlib.contextmanager
    def _files(self, origin: str | Sandbox | None) -> Iterator[Files | None]:
        """The files a new sandbox starts with, if any: a snapshot's, or a live sandbox's."""
        if origin is not None and self._disks is None:
            raise SandboxError("this machine's sandboxes have no disks, and so no snapshots")
        if isinstance(origin, Sandbox):
            with origin.files() as files:
                yield files
        else:
            yield None if origin is None else snapshot_files(self.snapshot_dir / origin)

    async def _create(self, sandbox_id: str, limits: Limits, files: Files | None) -> Sandbox:
        directory = self.sandbox_dir / sandbox_id
        cgroup = await anyio.to_thread.run_sync(self.cgroups.create, limits)
        if self.mode == "process":
            for home in ("root", "home/user"):
                (directory / "root" / home).mkdir(parents=True)
            return ProcessSandbox(sandbox_id, directory, self.cgroups, cgroup, limits)
        sandbox = NamespaceSandbox(sandbox_id, directory, self.cgroups, cgroup, limits)
        sandbox.snapshots = None if self._disks is None else self.snapshot_dir
        try:
            await self._boot(sandbox, files)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def drop_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot of this machine's."""
        await anyio.to_thread.run_sync(_remove_trees, [str(self.snapshot_dir / snapshot_id)])

    def keep_snapshots(self, snapshot_ids: Collection[str]) -> None:
        """Remove every snapshot of this machine's but these (blocks)."""
        gone = [p for p in self.snapshot_dir.iterdir() if p.name not in snapshot_ids]
        _remove_trees([str(path) for path in gone])

    async def _boot(self, sandbox: NamespaceSandbox, files: Files | None) -> None:
        # PID 1 makes the sandbox's directory, off the server's event loop
        own = self.config.network != "host"
        target = self.config.forward if own else None
        config = {
            "dir": str(sandbox.dir),
            "hostname": sandbox.id,
            "exposes": list(self.config.exposes),
            "shares": list(self.config.shares),
            # the state directory, should a share or an exposed path hold it
            "masks": [str(self.config.state_dir.resolve()), *self.config.masks],
            "loopback": own,
            "cgroups": [str(p) for p in sandbox.cgroup.procs_files],
            "listen": None if target is None else (target[1], ":" in target[0]),
        }
        disk = None if self._disks is None else await self._take_disk(files)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        sandbox.control = ours
        try:
            with theirs:
                fds = [theirs.fileno()] + ([] if disk is None else [disk.mount])
                await self._factory.request(marshal.dumps(config), fds)
        finally:
            if disk is not None:  # PID 1 has it now, or never will: the image goes with it
                sandbox.disk, sandbox.disks = disk.image, self._disks
                os.close(disk.mount)
        handles = await _answer(sandbox)
        sandbox.layer_fd = handles.pop("layer", -1)
        sandbox.root_fd = _open_root(sandbox.init_pid)
        sandbox.forwarder = self._forwarder
        sandbox.loopback = own
        if "listener" in handles:
            sandbox.listen(socket.socket(fileno=handles["listener"]))
        if files is not None:
            await anyio.to_thread.run_sync(sandbox.fill_scratch, files)

    async def _take_disk(self, files: Files | None) -> Disk:
        """A disk for a sandbox, holding the layers of `files` if given (PID 1 lays its
        root over them)."""
        assert self._disks is not None
        try:
            disk = await self._disks.take()
        except OSError as ex:
            raise SandboxError(f"cannot make the sandbox's disk: {ex.strerror or ex}") from None
        if files is None:
            return disk
        try:
            target = f"/proc/self/fd/{disk.mount}/{LAYERS}"
            await anyio.to_thread.run_sync(
                copy_tree, files.layers, target, (*files.fds, disk.mount)
            )
        except BaseException:
            disk.release()
            raise
        return disk


class _Factory:
    """The process that forks every namespace sandbox of this server (`sandboxes/_init.py`)."""

    def __init__(self, settings: list[str]) -> None:
        self._settings = settings
        """What the factory is started with: its sandboxes' directory, then the rest of its
        settings (see `_Setup` in `sandboxes._init`), in hex."""
        self._socket: socket.socket | None = None
        self._process: ChildProcess | None = None
        self._sending = anyio.Lock()

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            fd = theirs.fileno()
            self._process = spawn(
                SpawnOptions(
                    argv=[sys.executable, "-I", "-S", str(_INIT), *self._settings, str(fd)],
                    env={"PATH": DEFAULT_PATH},
                    pass_fds=(fd,),
                )
            )
        ours.setblocking(False)
        self._socket = ours
        return ours

    async def request(self, config: bytes, fds: list[int]) -> None:
        """Ask for a sandbox with the control socket `fds[0]` (and its disk, `fds[1]`),
        starting the factory if need be."""
        for attempt in (1, 2):
            sock = self._socket or self._start()
            try:
                await _send_fds(sock, self._sending, config, fds)
                return
            except _ENDED:
                # it died, killing its sandboxes: start a new one (unless another boot has)
                if sock is self._socket:
                    await self.stop()
                if attempt == 2:
                    raise SandboxError("the sandbox factory ended twice in a row") from None

    async def stop(self) -> None:
        """Kill the factory (and so every sandbox it made), if it runs."""
        # forget it first: a boot meanwhile starts a new factory, which this must not touch
        sock, self._socket = self._socket, None
        process, self._process = self._process, None
        if sock is not None:
            _close_socket(sock)
        if process is not None:
            process.signal(signal.SIGKILL)
            await process.wait()
            process.close()


async def _answer(sandbox: NamespaceSandbox) -> dict[str, int]:
    """Read a boot's answer on the control socket: PID 1's `started` with a pidfd of itself,
    then its `ready` with its descriptors; those, by name. Raises SandboxError with PID 1's
    or the factory's reason (PID 1's pidfd kept, for `close` to end it)."""
    assert sandbox.control is not None
    message, fds = "", list[int]()
    deadline = anyio.current_time() + _BOOT_TIMEOUT
    # once the factory has the request, PID 1 may exist and only its pidfd can end it: take
    # that first answer (at once, unless the factory is stuck) even from a cancelled boot
    with anyio.CancelScope(deadline=deadline, shield=True) as first:
        message, fds = await _receive(sandbox.control)
    with anyio.CancelScope(deadline=deadline) as rest:
        if message == "started" and fds:
            sandbox.init_fd = fds.pop(0)
            sandbox.init_pid = _pidfd_pid(sandbox.init_fd)
            _close_all(fds)
            message, fds = await _receive(sandbox.control)
    if first.cancelled_caught or rest.cancelled_caught:
        _close_all(fds)
        raise SandboxError(f"no answer from the sandbox's init in {_BOOT_TIMEOUT:g} s")
    if sandbox.init_fd < 0 and message.startswith("ready"):
        message = ""  # not from a PID 1 that said `started`
    return _ready(message, fds)


def _ready(message: str, fds: list[int]) -> dict[str, int]:
    """The descriptors PID 1 sent with its `ready`, by the names it gave them (`layer`,
    `listener`); SandboxError with its reason if it did not say `ready`."""
    verb, *names = message.split() or [""]
    if verb == "ready" and len(names) == len(fds):
        return dict(zip(names, fds, strict=True))
    _close_all(fds)
    raise SandboxError(message.removeprefix("error: ") or "the sandbox's init ended")


def _open_root(init_pid: int) -> int:
    """PID 1's root, built by now (`root` checks PID 1 still lives before each use)."""
    return os.open(f"/proc/{init_pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def _closed(fd: int) -> int:
    """Close `fd` if open; -1, to put in its place."""
    if fd >= 0:
        os.close(fd)
    return -1


def _remove_trees(paths: list[str]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


_ENDED = (BrokenPipeError, ConnectionResetError, anyio.ClosedResourceError)
"""How sending to a process that has ended (or on a socket closed meanwhile) fails."""


def _signal_group_from_host(init_pid: int, pid: int, sig: int) -> None:
    """Signal the process group of `pid`, a pid in the PID namespace of `init_pid`."""
    namespace = os.readlink(f"/proc/{init_pid}/ns/pid")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile
            if os.readlink(f"/proc/{entry}/ns/pid") != namespace:
                continue
            with open(f"/proc/{entry}/status") as status:
                nspid = next(line for line in status if line.startswith("NSpid:"))
            if int(nspid.split()[-1]) == pid:
                # the command leads its own session, so its host pid is its group's id
                os.killpg(int(entry), sig)
                return


async def _send_fds(
    sock: socket.socket, lock: anyio.Lock, message: bytes, fds: Sequence[int]
) -> None:
    """Send a message with descriptors on a non-blocking socket, waiting while it is full."""
    # anyio lets only one task wait to write to a socket: the others wait their turn here
    async with lock:
        while sock.fileno() >= 0:
            try:
                socket.send_fds(sock, [message], fds)
                return
            except BlockingIOError:
                await anyio.wait_writable(sock)
        raise anyio.ClosedResourceError


def _close_socket(sock: socket.socket) -> None:
    """Close a socket a task may be waiting on (it would watch a closed number, never woken)."""
    anyio.notify_closing(sock)
    sock.close()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _ended(pidfd: int) -> bool:
    """Whether the process of a pidfd has ended (a pidfd is readable from then on)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _pidfd_pid(pidfd: int) -> int:
    """The pid (in the server's PID namespace) of the process a pidfd refers to."""
    with open(f"/proc/self/fdinfo/{pidfd}") as info:
        for line in info:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise SandboxError("this kernel does not say whose a pidfd is (Linux 5.3+ needed)")


async def _receive(sock: socket.socket) -> tuple[str, list[int]]:
    """The next message on a non-blocking SOCK_SEQPACKET socket, with its descriptors."""
    while True:
        try:
            data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_LEN(8), socket.MSG_CMSG_CLOEXEC)
        except BlockingIOError:
            await anyio.wait_readable(sock)
            continue
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        return data.decode(errors="replace"), list(fds)
