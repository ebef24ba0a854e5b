"""The factory of namespace sandboxes and each sandbox's PID 1. Stdlib only: runs outside the package.

The server starts this file once, as `python -I -S _init.py SANDBOXES SETTINGS FD`
(SANDBOXES: the directory of its sandboxes' directories, which `ps` shows), and sends
each sandbox's config over the SOCK_SEQPACKET socket FD together with the sandbox's end of a
SOCK_SEQPACKET socket pair, its control socket, and its disk when the server gives sandboxes
one (a mount attached nowhere, see `sandboxes/_disks.py`). Forking this small, running interpreter costs
about half a millisecond where starting one costs 10-20 ms; every page it holds makes a fork
dearer, so it imports little (settings, configs and requests come as `marshal` data: both
ends run the same interpreter, and `json` would pull in `re`).

The factory lives in a mount namespace of its own that receives the host's mounts but sends
none back, where it keeps the base layer (`_prepare`): a small read-only tmpfs holding the
skeleton of a root, the host's system directories' links and places for the others, the
part of the host's /etc that programs need and every user of the host may read (the account
USER added to /etc/passwd and /etc/group, with its home), and places to mount what the server
exposes and shares. Nothing else of the host's is in a sandbox. (Changes to the host's /etc
reach new sandboxes once the server restarts.)

Per sandbox the factory forks PID 1 straight into a new PID namespace, and PID 1 unshares new
mount, UTS, IPC and (usually) network namespaces, joins the sandbox's cgroups and takes a
cgroup namespace rooted there, attaches the sandbox's disk on its directory, builds its root
(the base layer and the host's system directories, each under a writable layer on that
disk) and then serves its control socket: it starts commands with `posix_spawn` (no exec
chain: each gets its session, user, directory, environment and pipes from PID 1 directly),
signals their process groups, and reports each one's exit. Each of these processes dies with
its parent (PR_SET_PDEATHSIG), PID 1 also when the server closes its control socket, and PID
1 keeps no descriptor of the factory's, so killing the server ends every sandbox and a
sandbox cannot reach the factory.

Config: {"dir": the sandbox's directory in SANDBOXES, "hostname", "exposes": [(host path,
path in the sandbox)], "shares": [paths], "masks": [paths], "loopback": bool, "cgroups":
[cgroup.procs files], "listen": (port, ipv6) or None}. The control socket then gets
`started` from PID 1 with a pidfd of PID 1, then `ready layer [listener]` with the directory
of the sandbox's layers (its disk's top) and a socket listening on `listen` inside its
network, if asked, or `error: ...`; or only `error: ...` from the factory.

Requests on the control socket: `spawn` with descriptors [request, status, stdout, stderr,
stdin?], the request a memfd holding {"argv", "env", "cwd", "user", "uid", "gid"} (argv may
be megabytes) and, for a command on a terminal (the three descriptors its end), "tty": the
terminal's path, which the command opens as its controlling terminal; `signal PID SIG` sends SIG to the process group of a command still running;
`reset HOSTNAME` makes the sandbox anew for a run's next command (`_reset`: a fraction of a
boot's cost, most of which is the PID and network namespaces and the fork of PID 1), then
answers as a boot does, `ready [listener]` (with a new listener if the network was made
anew) or `error: ...`, after which the server ends the sandbox.
PID 1 also listens, at the `SOCKET` of `_sudo.py`, for the sandbox's sudo: that program, which
the factory writes to a tmpfs of its own (the settings' `tools`) that every root lays under
the host's /usr, read-only at SUDO_PROGRAM. PID 1 serves the sandbox's user and root only
(SO_PEERCRED), each request in a child of its own (`_handle_sudo`) that starts the command
as `spawn` does, as root or the account asked, passes on sudo's signals and reports its
exit. When sudo runs on a terminal, the handler gives the command a terminal of its own (with
the modes and size of sudo's) and hands its other end to sudo, which relays bytes and size
changes, so a root shell has job control.
PID 1 writes `pid N` (N as seen inside the sandbox) to the status pipe, then `exit CODE`
(negative: killed by that signal) once it has reaped the command. A command that cannot
start says why on its stderr and exits 127 (no such program), 126 (not executable) or 125
(no such directory, or one its user may not enter), as `env` would: PID 1 writes that and
reports `pid 0`, then the exit, with no process. As after any `posix_spawn` of glibc,
commands start with glibc's two internal signals (32 and 33) ignored, until a program that
uses them sets them. PID 1 ignores SIGINT, the one signal python would have it handle: no
signal sent from inside the sandbox can end it. Commands, root's included, run with Docker's
default capabilities less CAP_MKNOD (PID 1 drops the rest from its bounding set once the
sandbox is built) and under a seccomp filter at least as strict as Docker's default profile,
which PID 1 installs on itself once the sandbox is built: the calls it still needs to make
the sandbox anew pass only with its key (`_call`). As in Docker, the kernel's
tunables under /proc/sys and the like are read-only, and what /proc and /sys tell of the
host's kernel memory, keys, timers and firmware is hidden. PID 1 never loads code from the
sandbox's root: it reads /etc/group itself rather than through the C library's account
lookups, which load the modules the sandbox's nsswitch.conf names.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import gc
import marshal
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import termios
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` would add a megabyte to every fork
    from typing import Any, NoReturn

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_SLAVE = 1 << 19
_MNT_DETACH = 2
_MACHINE = os.uname().machine
_COLUMNS = {"x86_64": 0, "aarch64": 2, "riscv64": 2}
"""This machine's column of call numbers in `_REFUSED` (x86_64's, or the table aarch64 and
riscv64 share)."""
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
# what a command run as root keeps: Docker's default set, less CAP_MKNOD (no device cgroup
# here would stop a block device made with it); CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH,
# CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE and the rest would each reach past the sandbox
KEPT_CAPABILITIES = frozenset(
    {
        0,  # CAP_CHOWN
        1,  # CAP_DAC_OVERRIDE
        3,  # CAP_FOWNER
        4,  # CAP_FSETID
        5,  # CAP_KILL
        6,  # CAP_SETGID
        7,  # CAP_SETUID
        8,  # CAP_SETPCAP
        10,  # CAP_NET_BIND_SERVICE
        13,  # CAP_NET_RAW
        18,  # CAP_SYS_CHROOT
        29,  # CAP_AUDIT_WRITE
        31,  # CAP_SETFCAP
    }
)
_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MAX_FD = os.sysconf("SC_OPEN_MAX")
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_END_SECONDS = 5.0
_DEVICES = {
    "null": (1, 3),
    "zero": (1, 5),
    "full": (1, 7),
    "random": (1, 8),
    "urandom": (1, 9),
    "tty": (5, 0),
}
# what root in a sandbox could reach the host's kernel through without any capability, as
# Docker hides it: tunables (a `kernel.core_pattern` runs a program on the host), interrupts
# and buses made read-only; the kernel's memory, keys, timers and firmware hidden
_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
_HIDDEN = (
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/acpi",
    "/proc/scsi",
    "/proc/asound",
    "/sys/firmware",
)
# what python and PID 1 ignore, and a command must not inherit ignored
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGINT)

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


_key = 0
"""PID 1's key to the calls commands' seccomp filter refuses and PID 1 needs (see `_call`)."""


def _call(name: str, *args: bytes | int | None) -> int:
    """Make a call PID 1 needs after its sandbox is built, and commands may never make
    (`_KEYED`), with PID 1's key as its sixth argument: none of these calls uses one, and
    commands' filter, which PID 1 runs under too, lets them through with the key only."""
    words = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    words += [ctypes.c_long(0)] * (5 - len(words))
    return int(_libc.syscall(_REFUSED[name][_COLUMNS[_MACHINE]], *words, ctypes.c_uint64(_key)))


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _call(
            "mount",
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {fstype or 'bind'} on {target}",
    )


def _receive(sock: socket.socket, size: int, most: int) -> tuple[bytes, list[int]]:
    """A message and its descriptors, close-on-exec (`socket.recv_fds` drops the flag)."""
    data, ancillary, _, _ = sock.recvmsg(size, socket.CMSG_LEN(4 * most), socket.MSG_CMSG_CLOEXEC)
    fds = []
    for level, kind, payload in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
            fds += [fd for (fd,) in struct.iter_unpack("i", payload[: len(payload) // 4 * 4])]
    return data, fds


# the factory


def _copy_dir(base: str, path: str) -> None:
    """Make `path` in the base layer with the host's mode and owner (the top layer's win)."""
    if os.path.isdir(base + path):
        return
    _copy_dir(base, os.path.dirname(path))
    os.mkdir(base + path)
    if os.path.isdir(path):
        info = os.stat(path)
        os.chmod(base + path, info.st_mode & 0o7777)
        os.chown(base + path, info.st_uid, info.st_gid)


def _mountpoint(root: str, source: str, target: str) -> None:
    """Make somewhere under `root` to mount the host's `source` on at `target`."""
    if os.path.lexists(root + target):
        return
    if os.path.isdir(source):
        _copy_dir(root, target)
    else:
        _copy_dir(root, os.path.dirname(target))
        os.close(os.open(root + target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))


def _readable(info: os.stat_result) -> bool:
    """Whether every user of the host may read it (and enter it, for a directory)."""
    wanted = 0o005 if stat.S_ISDIR(info.st_mode) else 0o004
    return info.st_mode & wanted == wanted


def _unreadable(source: str, target: str) -> list[str]:
    """What, in the host's `source` (on its file system alone, as it is lent), not every user
    of the host may read: the files and directories a sandbox gets at `target` and the rest
    below it, to be hidden there (root in a sandbox may read any file it is shown)."""
    info = os.stat(source)
    if not _readable(info):
        return [target]
    device = info.st_dev
    found: list[str] = []
    directories = [source] if stat.S_ISDIR(info.st_mode) else []
    while directories:
        with contextlib.suppress(FileNotFoundError), os.scandir(directories.pop()) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone since the directory was read
                if info.st_dev != device or not (
                    stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)
                ):
                    continue  # a mount point (not lent), a link, a device...
                if not _readable(info):
                    found.append(target + entry.path[len(source) :])
                elif stat.S_ISDIR(info.st_mode):
                    directories.append(entry.path)
    return found


def _copy(source: str, target: str, keep_links: tuple[str, ...]) -> None:
    """Copy `source` to `target` with modes, owners and times, keeping only what every user of the
    host may read. A symlink stays one where it leads into `keep_links`; else what it
    leads to is copied."""
    info = os.lstat(source)
    if stat.S_ISLNK(info.st_mode):
        real = os.path.realpath(source)
        if any(real == kept or real.startswith(kept + "/") for kept in keep_links):
            os.symlink(os.readlink(source), target)
            return
        try:
            info = os.stat(source)
        except OSError:
            return  # leads nowhere
    if not _readable(info):
        return
    if stat.S_ISDIR(info.st_mode):
        os.mkdir(target)
        for name in os.listdir(source):
            _copy(f"{source}/{name}", f"{target}/{name}", keep_links)
    elif stat.S_ISREG(info.st_mode):
        with open(source, "rb") as original, open(target, "wb") as copy:
            copy.write(original.read())
    else:
        return
    os.chmod(target, info.st_mode & 0o7777)
    os.chown(target, info.st_uid, info.st_gid)
    # as the host's: programs compare them (python, with its compiled modules in /usr)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def _copy_etc(base: str, names: list[str], keep_links: tuple[str, ...]) -> None:
    """Copy the host's /etc entries named in `names` (`prefix*` matches by prefix)."""
    os.mkdir(base + "/etc", 0o755)
    for name in sorted(os.listdir("/etc")):
        if any(name == n or (n.endswith("*") and name.startswith(n[:-1])) for n in names):
            _copy(f"/etc/{name}", f"{base}/etc/{name}", keep_links)


def _append(path: str, line: str) -> None:
    with open(path, "a+") as file:
        file.seek(0)
        content = file.read()
        file.write(("\n" if content and not content.endswith("\n") else "") + line)


def _system_accounts(base: str) -> None:
    """Keep only the system's accounts and groups of the host's (ids below 1000, or from
    60000 on, as `nobody`'s) in the base layer's /etc: the host's users are none of a
    sandbox's business."""
    names = {entry[0] for entry in _keep_system(base + "/etc/passwd")}
    _keep_system(base + "/etc/group", members=names)


def _keep_system(path: str, members: set[str] | None = None) -> list[list[str]]:
    """Rewrite an /etc/passwd or /etc/group with its system entries only (a group's members
    among `members` only, if given); those entries."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    with open(path) as file:
        entries = [line.rstrip("\n").split(":") for line in file if line.count(":") >= 2]
    kept = [entry for entry in entries if entry[2].isdigit() and not 1000 <= int(entry[2]) < 60000]
    for entry in kept:
        if members is not None and len(entry) > 3:
            entry[3] = ",".join(m for m in entry[3].split(",") if m in members)
    with open(path, "w") as file:
        file.write("".join(":".join(entry) + "\n" for entry in kept))
    return kept


def _add_user(base: str, name: str, uid: int) -> int:
    """Add the account `name` to the base layer's /etc, with `uid` or the next id that no
    account or group of the host's has: a host user's files in a shared or exposed directory
    are then not the sandbox user's. Its uid (the host's, if it has a system account of
    that name)."""
    passwd, group = base + "/etc/passwd", base + "/etc/group"
    with open(passwd) as file:
        for line in file:
            entry = line.split(":")
            if entry[0] == name and len(entry) > 2 and entry[2].isdigit():
                return int(entry[2])
    taken = _host_ids("/etc/passwd") | _host_ids("/etc/group")
    while uid in taken:
        uid += 1
    home = f"/home/{name}"
    _append(passwd, f"{name}:x:{uid}:{uid}::{home}:/bin/bash\n")
    _append(group, f"{name}:x:{uid}:\n")
    os.mkdir(base + home, 0o755)
    os.chown(base + home, uid, uid)
    return uid


def _host_ids(path: str) -> set[int]:
    """The ids of the host's accounts (an /etc/passwd) or groups (an /etc/group)."""
    try:
        with open(path) as file:
            fields = [line.split(":") for line in file if line.count(":") >= 2]
    except FileNotFoundError:
        return set()
    return {int(entry[2]) for entry in fields if entry[2].isdigit()}


def _shadow(base: str) -> None:
    """The sandbox's own /etc/shadow and /etc/gshadow: every account of its passwd and group
    with its password locked (for the tools that manage accounts; nothing of the host's)."""
    with open(base + "/etc/group") as file:
        groups = [line.rstrip("\n").split(":") for line in file if line.count(":") >= 3]
    shadow_gid = next((int(g[2]) for g in groups if g[0] == "shadow" and g[2].isdigit()), 0)
    with open(base + "/etc/passwd") as file:
        users = [line.split(":", 1)[0] for line in file if line.count(":") >= 6]
    today = int(time.time() // 86400)
    for name, lines in (
        ("shadow", [f"{user}:*:{today}:0:99999:7:::" for user in users]),
        ("gshadow", [f"{g[0]}:*::{g[3]}" for g in groups]),
    ):
        path = f"{base}/etc/{name}"
        with open(path, "w") as file:
            file.write("".join(line + "\n" for line in lines))
        os.chown(path, 0, shadow_gid)
        os.chmod(path, 0o640)


# the directories of a root that the host does not lend it: made empty in the base layer
_SKELETON = {
    "/dev": 0o755,
    "/proc": 0o555,
    "/sys": 0o555,
    "/tmp": 0o1777,
    "/run": 0o755,
    "/run/lock": 0o1777,
    "/root": 0o700,
    "/home": 0o755,
    "/mnt": 0o755,
    "/media": 0o755,
    "/srv": 0o755,
    "/var": 0o755,
    "/var/tmp": 0o1777,
    "/var/cache": 0o755,
    "/var/lib": 0o755,
    "/var/log": 0o755,
    "/var/spool": 0o755,
}


class _Setup:
    """What the factory prepares once for all its sandboxes (each PID 1 inherits it)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.sandboxes: str = settings["sandboxes"]
        self.base: str = settings["base"]
        self.layers: list[str] = []
        """The host's directories each root lays a writable layer over, as the root's own."""
        self.unreadable: list[str] = []
        """What each root hides, in the sandbox's terms: what of the host's directories and
        exposed paths not every user of the host may read."""
        self.filter = b""
        """The seccomp program of PID 1 and every command, with placeholders for PID 1's key."""
        self.key_at: list[int] = []
        """Where the program compares the key's words (low, then high)."""
        self.uid = -1
        """The uid of the sandbox's user, who may use sudo."""
        self.tools = ""
        """The factory's directory of what every root has besides the host's (sudo at
        `SUDO_PROGRAM`); '' for none (no python for sudo)."""
        self.socket = ""
        """Where sudo asks PID 1 (`SOCKET` in `_sudo.py`)."""


def _prepare(settings: dict[str, Any]) -> _Setup:
    """Enter the factory's own mount namespace and build the base layer there: the skeleton
    of a root, the host's system directories (links as links, directories as places for
    their layers), the allowed part of /etc with the sandbox's user added, and places to
    mount what the server exposes and shares."""
    if _MACHINE not in _COLUMNS:
        raise OSError(errno.ENOSYS, f"system call numbers on {_MACHINE} are not known here")
    setup = _Setup(settings)
    base = setup.base
    _check(_call("unshare", _CLONE_NEWNS), "unshare")
    _mount("none", "/", None, _MS_REC | _MS_SLAVE)
    os.makedirs(base, exist_ok=True)
    _mount("tmpfs", base, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755")
    for path, mode in _SKELETON.items():
        os.mkdir(base + path)
        os.chmod(base + path, mode)
    for path in settings["system"]:
        if os.path.islink(path):
            os.symlink(os.readlink(path), base + path)
        elif os.path.isdir(path):
            _copy_dir(base, path)
            setup.layers.append(path)
    _copy_etc(base, settings["etc"], (*setup.layers, "/etc", "/proc"))
    _system_accounts(base)
    setup.uid = _add_user(base, settings["user"], settings["uid"])
    _shadow(base)
    for source, target in settings["mounts"]:
        _mountpoint(base, source, target)
    sudo = _sudo_source()
    setup.socket = next(
        line.split('"')[1] for line in sudo.splitlines() if line.startswith("SOCKET = ")
    )
    os.makedirs(base + os.path.dirname(setup.socket), 0o755, exist_ok=True)
    for source, target in [*((path, path) for path in setup.layers), *settings["exposes"]]:
        setup.unreadable += _unreadable(source, target)
    _mount("none", base, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    setup.tools = _install_sudo(settings["tools"], settings["system"], sudo)
    program = _command_filter(_MACHINE)
    setup.filter = _pack(program)
    setup.key_at = [at for at, (_, _, _, k) in enumerate(program) if k in _KEY_WORDS]
    return setup


SUDO_PROGRAM = "/usr/bin/sudo"
"""Where every root has the server's sudo (`sandboxes/_sudo.py`), over the host's if it has one."""
_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")


def _sudo_source() -> str:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sudo.py")) as source:
        return source.read()


def _install_sudo(tools: str, system: list[str], source: str) -> str:
    """Write the sudo program (`source`), run by a python of the sandboxes' system
    directories, at `SUDO_PROGRAM` under `tools`, a read-only tmpfs of the factory's that
    roots lay under the host's directories (see `_lower`); `tools` ('' if no python is
    there)."""
    python = next(
        (
            real
            for real in map(os.path.realpath, (sys.executable, *_PYTHONS))
            if any(real.startswith(path + "/") for path in system)
            and os.path.isfile(real)
            and _readable(os.stat(real))
        ),
        "",
    )
    if not python:
        return ""
    program = f"#!{python} -IS\n" + source
    os.makedirs(tools, exist_ok=True)
    _mount("tmpfs", tools, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755")
    _copy_dir(tools, os.path.dirname(SUDO_PROGRAM))  # as the host's, which it lies over
    with open(tools + SUDO_PROGRAM, "w") as file:
        file.write(program)
    os.chmod(tools + SUDO_PROGRAM, 0o755)
    _mount("none", tools, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    return tools


def _serve(setup: _Setup, fd: int) -> None:
    """Fork PID 1 for every config received on `fd`, until the server closes it."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps every PID 1
    factory = os.getpid()
    own_pids = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    gc.freeze()  # a collection in a child would touch, and so copy, every page
    with socket.socket(fileno=fd) as sock:
        while True:
            data, fds = _receive(sock, 65536, 2)
            if not data or not fds:
                _close_fds(fds)
                return
            disk = fds[1] if len(fds) > 1 else -1
            with socket.socket(fileno=fds[0]) as control:
                try:
                    config = marshal.loads(data)
                    if os.path.dirname(config["dir"]) != setup.sandboxes:
                        raise ValueError(f"{config['dir']!r} is not under {setup.sandboxes}")
                    _fork_init(config, setup, control, disk, (factory, own_pids))
                except Exception as ex:  # the factory serves on, whatever one request did
                    with contextlib.suppress(OSError):
                        control.send(f"error: {ex}".encode())
                finally:
                    _close_fds(fds[1:])  # PID 1 has its own


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _fork_init(
    config: dict[str, Any],
    setup: _Setup,
    control: socket.socket,
    disk: int,
    factory: tuple[int, int],
) -> None:
    """Fork PID 1 of a new PID namespace (the factory, `factory`'s pid and its own PID
    namespace, stays in its own)."""
    _check(_call("unshare", _CLONE_NEWPID), "unshare")
    try:
        if os.fork() == 0:
            _init(config, setup, control, disk, factory[0])
    finally:
        _check(_call("setns", factory[1], _CLONE_NEWPID), "setns")


# PID 1: boot


def _mount_dev(root: str) -> None:
    dev = root + "/dev"
    _mount("tmpfs", dev, "tmpfs", _MS_NOSUID, "mode=755")
    for name, (major, minor) in _DEVICES.items():
        os.mknod(f"{dev}/{name}", stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(f"{dev}/{name}", 0o666)  # mknod would apply the umask
    os.mkdir(dev + "/pts")
    _mount("devpts", dev + "/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666")
    os.mkdir(dev + "/shm")
    _mount("tmpfs", dev + "/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    os.symlink("pts/ptmx", dev + "/ptmx")
    os.symlink("/proc/self/fd", dev + "/fd")
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", f"{dev}/{name}")


def _mask(root: str, path: str) -> str | None:
    """Hide the host's `path` where the root has it; where it mounted, if it did."""
    # the root shows the host's directories as the host resolves them: a mask at or below a
    # link must cover where the link leads (resolved here, the link would lead out of `root`)
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            target = root + os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
    except OSError:
        return None  # nothing there to hide
    return _cover(root, target)


def _cover(root: str, target: str) -> str | None:
    """Hide `target` (a directory under an empty read-only tmpfs, a file under the root's
    /dev/null); `target` if it mounted there."""
    try:
        kind = os.lstat(target).st_mode  # what the sandbox has there (not under its /tmp)
    except OSError:
        return None  # nothing there to hide
    if stat.S_ISDIR(kind):
        _mount("tmpfs", target, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k,mode=755")
    elif stat.S_ISREG(kind):
        # the sandbox's own /dev/null, read-only: a chmod of the file would be one of the node
        _bind_read_only(root + "/dev/null", target)
    else:
        return None
    return target


def _bind_read_only(source: str, target: str, flags: int = _MS_NOEXEC) -> None:
    _mount(source, target, None, _MS_BIND)
    _mount("none", target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | flags)


def _mount_overlay(lower: str, name: str, target: str) -> None:
    """Lay the upper layer `name` of the sandbox's layer directory (the working directory)
    over `lower` at `target`."""
    # nosuid, as every mount of a root: the host's set-user-ID programs (passwd, mount...)
    # give no process of the sandbox their owner's rights, sudo included (see `_sudo.py`).
    # the sandbox's mountinfo shows the options as given: paths relative to the layer
    # directory show nothing of where the server keeps it. volatile (Linux 5.10+) skips the
    # syncs of a throwaway upper layer: copy-ups are ten times faster, and ending the sandbox
    # does not sync the whole disk
    options = f"lowerdir={lower},upperdir=up/{name},workdir=wd/{name}"
    try:
        _mount("overlay", target, "overlay", _MS_NOSUID, options + ",volatile")
    except OSError:
        _mount("overlay", target, "overlay", _MS_NOSUID, options)


def _lower(setup: _Setup, path: str) -> str:
    """The lower layers of the root's `path` (relative to the working directory, the layer
    directory, as the base layer's are): the host's, under what the factory's tools hold
    there, so that sudo's place is there at no copy-up's cost."""
    tools = setup.tools + path
    return f"{os.path.relpath(tools)}:{path}" if setup.tools and os.path.isdir(tools) else path


def _layer_name(path: str) -> str:
    """The name of the upper layer of a root laid over `path` ("/": the base layer)."""
    return path.strip("/") or "rootfs"


_SCRATCH = ("/tmp", "/dev")
"""The mounts of a root that a command can change: made anew with each sandbox."""


def _mount_scratch(root: str) -> None:
    _mount("tmpfs", root + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    _mount_dev(root)


def _build_root(config: dict[str, Any], setup: _Setup, layer: str) -> bool:
    """Build the sandbox's root and pivot into it; whether only its own mounts are in
    /tmp and /dev (no share, exposed path or mask), so that making those anew makes the
    root anew.

    The root holds nothing of the host's but what is allowed: the base layer, the host's
    system directories under writable layers of their own, what the server exposes
    (read-only) and shares (read-write).
    """
    root = layer + "/mnt"
    os.chdir(layer)
    _mount_overlay(os.path.relpath(setup.base), _layer_name("/"), root)
    for path in setup.layers:
        _mount_overlay(_lower(setup, path), _layer_name(path), root + path)
    _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("sysfs", root + "/sys", "sysfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount_scratch(root)
    for path in _READ_ONLY:
        if os.path.exists(root + path):
            _bind_read_only(root + path, root + path)
    targets = []
    for source, path in config["exposes"]:
        _mountpoint(root, source, path)
        _bind_read_only(source, root + path, _MS_NODEV)
        targets.append(root + path)
    for path in config["shares"]:
        os.makedirs(root + path, exist_ok=True)
        _mount(path, root + path, None, _MS_BIND | _MS_REC)
        _mount("none", root + path, None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID)
        targets.append(root + path)
    if setup.tools:  # read-only for root too (mounts are PID 1's alone)
        _bind_read_only(setup.tools + SUDO_PROGRAM, root + SUDO_PROGRAM, _MS_NODEV)
    # masks last: they may lie in what is exposed or shared
    targets += [_mask(root, path) for path in (*_HIDDEN, *config["masks"])]
    targets += [_cover(root, root + path) for path in setup.unreadable]
    # pivot_root(".", ".") stacks the old root under the new one, so no directory is needed
    os.chdir(root)
    _check(_call("pivot_root", b".", b"."), "pivot_root")
    _check(_call("umount2", b".", _MNT_DETACH), "umount old root")
    os.chdir("/")
    scratch = tuple(root + path + "/" for path in _SCRATCH)
    return not any(t and (t + "/").startswith(scratch) for t in targets)


def _loopback_up() -> None:
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def _listen(port: int, ipv6: bool) -> socket.socket:
    """A socket listening on `port` of every address of the sandbox's network."""
    listener = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", port))
    listener.listen(128)
    return listener


def _hide_command_line() -> None:
    """Write `init` over the factory's command line that PID 1 inherited (the interpreter's
    and the server's paths), as the sandbox reads it in /proc/1/cmdline; the bytes stay where
    they are (moving them takes CAP_SYS_RESOURCE)."""
    with open("/proc/self/stat") as own:
        fields = own.read().rpartition(")")[2].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end: fields 48 and 49
    ctypes.memmove(start, b"init".ljust(end - start, b"\0"), end - start)


def _parent_pid() -> int:
    # getppid() says 0 in a new PID namespace: ask the host's /proc, still mounted here
    with open("/proc/self/stat") as own:
        return int(own.read().rpartition(")")[2].split()[1])


class _State:
    """What PID 1 keeps to make its sandbox anew."""

    def __init__(self, config: dict[str, Any], setup: _Setup) -> None:
        self.config = config
        self.setup = setup
        self.host = -1
        """The mount namespace PID 1 made first: the host's mounts, private."""
        self.layer = config["dir"]
        """The directory of the root's layers (the sandbox's disk, mounted on its directory)."""
        self.uppers: list[int] = []
        """The upper layers' directories, under the root mounted on them."""
        self.fresh: tuple[object, ...] = ()
        """The upper layers once the root was built on them (layers still so are kept)."""
        self.scratch_only = False
        """Whether making /tmp and /dev anew makes the root anew (see `_build_root`)."""
        self.inherited: tuple[dict[int, tuple[int, int]], bytes] = ({}, b"")
        """What commands get from PID 1 and can change in it: its resource limits (as
        `prlimit --pid 1` does) and OOM score adjustment (through /proc/1)."""
        self.network = b""
        """The network namespace's counters when it was made (unchanged, it was not used)."""
        self.layers = 0
        """How many sets of upper layers were put aside (numbering them)."""
        self.sudo: socket.socket | None = None
        """The socket PID 1 takes sudo's requests on, in the root (at `setup.socket`)."""
        self.handlers: set[int] = set()
        """The processes serving sudo's requests (each one's command their child)."""


def _boot(config: dict[str, Any], setup: _Setup, control: socket.socket, disk: int) -> _State:
    """Enter the sandbox's namespaces and cgroups, attach its disk (if the server gave one),
    build its root, and say `ready` with the directory of its layers."""
    flags = _CLONE_NEWNS | _CLONE_NEWUTS | _CLONE_NEWIPC
    if config["loopback"]:
        flags |= _CLONE_NEWNET
    _check(_call("unshare", flags), "unshare")
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    for procs in config["cgroups"]:
        with open(procs, "w") as file:
            file.write("0\n")
    # the sandbox's cgroups are the root of those it sees
    _check(_call("unshare", _CLONE_NEWCGROUP), "unshare")
    state = _State(config, setup)
    state.host = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    os.mkdir(state.layer)
    if disk >= 0:
        _attach_disk(disk, state.layer)
    os.mkdir(state.layer + "/mnt")
    _make_uppers(state)
    layer = os.open(state.layer, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    _enter_root(state)
    listener = _network(state)
    state.inherited = _inherited()
    _drop_capabilities()
    _install_filter(_keyed(setup))
    _ready(control, config["hostname"], {"layer": layer, "listener": listener})
    os.close(layer)
    return state


def _make_uppers(state: _State) -> None:
    """Make the empty upper layers of a root, and their overlays' work directories (a
    snapshot's layers, which the server put on the disk, are kept as they are)."""
    names = [_layer_name(path) for path in ("/", *state.setup.layers)]
    for kind in ("up", "wd"):
        for name in names:
            os.makedirs(f"{state.layer}/{kind}/{name}", exist_ok=True)


def _enter_root(state: _State) -> None:
    """Build the sandbox's root in a new mount namespace made from the host's, and enter it."""
    _check(_call("unshare", _CLONE_NEWNS), "unshare")
    for fd in state.uppers:
        os.close(fd)
    state.uppers = [
        os.open(f"{state.layer}/up/{_layer_name(path)}", _DIRECTORY)
        for path in ("/", *state.setup.layers)
    ]
    state.scratch_only = _build_root(state.config, state.setup, state.layer)
    state.fresh = tuple(_upper(fd) for fd in state.uppers)
    if state.sudo is not None:
        state.sudo.close()  # the last root's
    state.sudo = _listen_for_sudo(state.setup.socket)


# PID 1: the sandbox's disk

_SYS_MOVE_MOUNT, _MOVE_MOUNT_F_EMPTY_PATH, _AT_FDCWD = 429, 4, -100


def _attach_disk(disk: int, directory: str) -> None:
    """Attach the sandbox's disk (a mount the server made, attached nowhere) on its directory:
    the root's layers go on it, and can take no more than it holds."""
    _check(
        _libc.syscall(
            _SYS_MOVE_MOUNT, disk, b"", _AT_FDCWD, directory.encode(), _MOVE_MOUNT_F_EMPTY_PATH
        ),
        "attach the disk",
    )
    os.close(disk)


def _network(state: _State) -> socket.socket | None:
    """Bring up the sandbox's loopback-only network; a listener in it, if asked."""
    if not state.config["loopback"]:
        return None
    _loopback_up()
    listen = state.config["listen"]
    listener = None if listen is None else _listen(*listen)
    state.network = _counters()
    return listener


def _renew_network(state: _State) -> socket.socket | None:
    """Make the network anew if a command used it (see `_counters`); its new listener."""
    if not state.config["loopback"] or _counters() == state.network:
        return None
    _check(_call("unshare", _CLONE_NEWNET), "unshare")
    return _network(state)


def _ready(
    control: socket.socket, hostname: str, handles: dict[str, int | socket.socket | None]
) -> None:
    """Take `hostname` and say `ready`, naming the descriptors sent with it (`layer`: the
    sandbox's layer directory; `listener`: a socket listening in its network)."""
    name = hostname.encode()
    _check(_call("sethostname", name, len(name)), "sethostname")
    sent = {key: value for key, value in handles.items() if value is not None}
    fds = [value if isinstance(value, int) else value.fileno() for value in sent.values()]
    socket.send_fds(control, [" ".join(["ready", *sent]).encode()], fds)
    for value in sent.values():
        if isinstance(value, socket.socket):
            value.close()


def _inherited() -> tuple[dict[int, tuple[int, int]], bytes]:
    kinds = {getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_")}
    limits = {kind: resource.getrlimit(kind) for kind in kinds}
    with open("/proc/self/oom_score_adj", "rb") as adj:
        return limits, adj.read()


def _restore(inherited: tuple[dict[int, tuple[int, int]], bytes]) -> None:
    limits, adj = inherited
    for kind, limit in limits.items():
        resource.setrlimit(kind, limit)
    with open("/proc/self/oom_score_adj", "wb") as file:
        file.write(adj)


def _counters() -> bytes:
    """Everything a network namespace counts: packets, errors, on every protocol. A socket
    that outlives its process (TIME-WAIT) has sent packets, so unchanged counters mean an
    unused network."""
    counters = b""
    for name in ("dev", "snmp", "snmp6", "netstat"):
        with contextlib.suppress(FileNotFoundError), open("/proc/self/net/" + name, "rb") as f:
            counters += f.read()
    return counters


def _upper(fd: int) -> tuple[object, ...]:
    """What a command can change of an upper layer's top directory (all it holds included)."""
    info = os.stat(fd)
    xattrs = tuple((name, os.getxattr(fd, name)) for name in sorted(os.listxattr(fd)))
    times = info.st_mtime_ns, info.st_ctime_ns
    return (os.listdir(fd), info.st_mode, info.st_uid, info.st_gid, times, xattrs)


def _drop_capabilities() -> None:
    """Take the capabilities a command must not have out of PID 1's bounding set: PID 1
    keeps its own, and whatever it starts, root included, can never gain them."""
    with open("/proc/sys/kernel/cap_last_cap") as last:
        capabilities = range(int(last.read()) + 1)
    for capability in capabilities:
        if capability not in KEPT_CAPABILITIES:
            _check(_libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), "drop a capability")


# Commands' seccomp filter, at least as strict as Docker's default profile. That profile
# lets a container with Docker's default capabilities make a list of calls and refuses every
# other; `_REFUSED` is every other call, by its number on x86_64, on i386, and in the table
# aarch64 and riscv64 share (None: no such call there). Left out: calls no kernel has
# implemented for years (they fail with ENOSYS), and those `_command_filter` judges by their
# arguments. Refused, among others: user and other namespaces (`unshare`, `setns`), mounts,
# bpf, io_uring, perf_event_open, kernel modules and kexec, open_by_handle_at,
# userfaultfd, the kernel's keyrings (not namespaced: every sandbox's root would share the
# host root's), clocks, swap, reboot.
_REFUSED = {
    "acct": (163, 51, 89),
    "add_key": (248, 286, 217),
    "arch_prctl": (None, 384, None),
    "bdflush": (None, 134, None),
    "bpf": (321, 357, 280),
    "clock_settime": (227, 264, 112),
    "clock_settime64": (None, 404, None),
    "delete_module": (176, 129, 106),
    "fanotify_init": (300, 338, 262),
    "file_getattr": (468, 468, 468),
    "file_setattr": (469, 469, 469),
    "finit_module": (313, 350, 273),
    "fsconfig": (431, 431, 431),
    "fsmount": (432, 432, 432),
    "fsopen": (430, 430, 430),
    "fspick": (433, 433, 433),
    "get_mempolicy": (239, 275, 236),
    "init_module": (175, 128, 105),
    "io_uring_enter": (426, 426, 426),
    "io_uring_register": (427, 427, 427),
    "io_uring_setup": (425, 425, 425),
    "ioperm": (173, 101, None),
    "iopl": (172, 110, None),
    "kcmp": (312, 349, 272),
    "kexec_file_load": (320, None, 294),
    "kexec_load": (246, 283, 104),
    "keyctl": (250, 288, 219),
    "lookup_dcookie": (212, 253, 18),
    "lsm_get_self_attr": (459, 459, 459),
    "lsm_list_modules": (461, 461, 461),
    "lsm_set_self_attr": (460, 460, 460),
    "mbind": (237, 274, 235),
    "migrate_pages": (256, 294, 238),
    "mount": (165, 21, 40),
    "mount_setattr": (442, 442, 442),
    "move_mount": (429, 429, 429),
    "move_pages": (279, 317, 239),
    "nice": (None, 34, None),
    "oldfstat": (None, 28, None),
    "oldlstat": (None, 84, None),
    "oldolduname": (None, 59, None),
    "oldstat": (None, 18, None),
    "olduname": (None, 109, None),
    "open_by_handle_at": (304, 342, 265),
    "open_tree": (428, 428, 428),
    "open_tree_attr": (467, 467, 467),
    "perf_event_open": (298, 336, 241),
    "pidfd_getfd": (438, 438, 438),
    "pivot_root": (155, 217, 41),
    "process_madvise": (440, 440, 440),
    "quotactl": (179, 131, 60),
    "quotactl_fd": (443, 443, 443),
    "readdir": (None, 89, None),
    "reboot": (169, 88, 142),
    "request_key": (249, 287, 218),
    "set_mempolicy": (238, 276, 237),
    "set_mempolicy_home_node": (450, 450, 450),
    "setdomainname": (171, 121, 162),
    "sethostname": (170, 74, 161),
    "setns": (308, 346, 268),
    "settimeofday": (164, 79, 170),
    "sgetmask": (None, 68, None),
    "sigaction": (None, 67, None),
    "signal": (None, 48, None),
    "sigpending": (None, 73, None),
    "sigsuspend": (None, 72, None),
    "ssetmask": (None, 69, None),
    "stime": (None, 25, None),
    "swapoff": (168, 115, 225),
    "swapon": (167, 87, 224),
    "_sysctl": (156, 149, None),
    "sysfs": (139, 135, None),
    "syslog": (103, 103, 116),
    "ulimit": (None, 58, None),
    "umount": (None, 22, None),
    "umount2": (166, 52, 39),
    "unshare": (272, 310, 97),
    "uselib": (134, 86, None),
    "userfaultfd": (323, 374, 282),
    "ustat": (136, 62, None),
    "vhangup": (153, 111, 58),
    "vm86": (None, 166, None),
    "vm86old": (None, 113, None),
}
_BY_ARGUMENTS = {
    "clone": (56, 120, 220),
    "clone3": (435, 435, 435),
    "personality": (135, 136, 92),
    "socket": (41, 359, 198),
}
_ARCHES = {
    "x86_64": {0xC000003E: 0, 0x40000003: 1},  # and i386, for 32-bit programs
    "aarch64": {0xC00000B7: 2},
    "riscv64": {0xC00000F3: 2},
}
"""By machine, the architectures (AUDIT_ARCH_*) a command may call with there, and their
column of numbers; a call from any other (such as x86_64's x32 ABI, or 32-bit ARM on
aarch64) kills the process."""
_X32 = 0x40000000
_LAST_CALL = 469
"""The highest call number known here: newer calls fail with ENOSYS, as on an older kernel."""
_NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID and NEWNET: `clone` may use none."""
_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
"""What `personality` may set (Linux, its 32-bit variants, or the query): not, for example,
ADDR_NO_RANDOMIZE."""
_SOCKET_FAMILY_END = 46
_REFUSED_FAMILIES = (12, 19, 20, 23, 25, 34, 37, 38, 40)
"""Socket families Docker refuses: removed ones, AF_ALG (the kernel's crypto API) and
AF_VSOCK (host and guest talk over it, not namespaced); and every family from AF_MAX on."""
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_LD, _JA, _JEQ, _JGE, _JSET, _RET = 0x20, 0x05, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0, _ARG5 = 0, 4, 16, 56
"""Offsets in struct seccomp_data (the low word of the first and of the sixth argument: these
architectures are little-endian)."""
_KEYED = ("mount", "umount2", "pivot_root", "unshare", "setns", "sethostname")
"""The calls PID 1 makes the sandbox anew with, which commands may never make: the filter
lets them through with PID 1's key as their sixth argument (unused by each of them) only,
and `unshare` never with CLONE_NEWUSER."""
_KEY_WORDS = (0x6B657931, 0x6B657932)
"""Placeholders for the key's low and high words in the program, until PID 1 has its key."""
_CLONE_NEWUSER = 0x10000000


def _command_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """Commands' seccomp program on `machine`, as (code, jt, jf, k) instructions (only its
    own architectures': a filter costs the kernel more to take the longer it is)."""
    if machine not in _ARCHES:
        raise OSError(errno.ENOSYS, f"system call numbers on {machine} are not known here")
    arches = _ARCHES[machine]
    code: list[Any] = [(_LD, 0, 0, _ARCH)]
    for arch in arches:
        code += [(_JEQ, 0, 1, arch), (_JA, 0, 0, f"arch {arch}")]
    code += [(_RET, 0, 0, _KILL)]
    for arch, column in arches.items():
        native = column == _COLUMNS[machine]  # PID 1's own architecture
        code += [f"arch {arch}", *_arch_filter(f"{arch}:", column, native, arch == 0xC000003E)]
    return _assemble(code)


def _arch_filter(at: str, column: int, native: bool, x86_64: bool) -> list[Any]:
    """The part of the program for one architecture (`native`: PID 1's); its labels start
    with `at`."""
    code: list[Any] = [(_LD, 0, 0, _NR)]
    if x86_64:  # an x32 program: its calls are x86_64's with this bit set
        code += [(_JSET, at + "kill", 0, _X32)]
    code += _search(at, _runs(column, native))
    # BPF jumps only forward: each call judged by its arguments ends at the returns below
    code += [at + "clone", (_LD, 0, 0, _ARG0), (_JSET, at + "refuse", 0, _NAMESPACE_FLAGS)]
    code += [(_JA, 0, 0, at + "allow")]
    code += [at + "personality", (_LD, 0, 0, _ARG0)]
    code += [(_JEQ, at + "allow", 0, value) for value in _PERSONALITIES]
    code += [(_JA, 0, 0, at + "refuse")]
    if native:
        code += [at + "unshare", (_LD, 0, 0, _ARG0), (_JSET, at + "refuse", 0, _CLONE_NEWUSER)]
        code += [at + "keyed", (_LD, 0, 0, _ARG5), (_JEQ, 0, at + "refuse", _KEY_WORDS[0])]
        code += [(_LD, 0, 0, _ARG5 + 4), (_JEQ, at + "allow", at + "refuse", _KEY_WORDS[1])]
    code += [at + "socket", (_LD, 0, 0, _ARG0), (_JGE, at + "refuse", 0, _SOCKET_FAMILY_END)]
    code += [(_JEQ, at + "refuse", 0, family) for family in _REFUSED_FAMILIES]
    code += [at + "allow", (_RET, 0, 0, _ALLOW)]
    code += [at + "refuse", (_RET, 0, 0, _ERRNO | errno.EPERM)]
    code += [at + "clone3", at + "nosys", (_RET, 0, 0, _ERRNO | errno.ENOSYS)]
    code += [at + "kill", (_RET, 0, 0, _KILL)]
    return code


def _runs(column: int, native: bool) -> list[tuple[int, str]]:
    """Every call number, from 0 on, as runs of numbers with one fate: (the run's first
    number, the label of its fate: allow, refuse, nosys, or the call judged by arguments)."""
    fates = {n: "refuse" for numbers in _REFUSED.values() if (n := numbers[column]) is not None}
    fates |= {numbers[column]: name for name, numbers in _BY_ARGUMENTS.items()}
    if native:
        keyed = {name: number for name in _KEYED if (number := _REFUSED[name][column])}
        fates |= {number: "keyed" for number in keyed.values()} | {keyed["unshare"]: "unshare"}
    runs: list[tuple[int, str]] = []
    for number in range(_LAST_CALL + 2):
        fate = "nosys" if number > _LAST_CALL else fates.get(number, "allow")
        if not runs or runs[-1][1] != fate:
            runs.append((number, fate))
    return runs


def _search(at: str, runs: list[tuple[int, str]]) -> list[Any]:
    """A binary search of `runs` for the call number loaded: a few jumps to its fate, for
    every call, where comparing it with every refused number in turn would take dozens (and
    the kernel, which works out the fate of each call once when a filter is installed, would
    take that much longer)."""
    if len(runs) == 1:
        return [(_JA, 0, 0, at + runs[0][1])]
    middle = len(runs) // 2
    right = f"{at}from {runs[middle][0]}"
    left_code, right_code = _search(at, runs[:middle]), _search(at, runs[middle:])
    return [(_JGE, right, 0, runs[middle][0]), *left_code, right, *right_code]


def _assemble(code: list[Any]) -> list[tuple[int, int, int, int]]:
    """Instructions with their labels (strings) resolved to the forward offsets of BPF's
    jumps (jt and jf, or k for an unconditional one)."""
    labels: dict[str, int] = {}
    instructions: list[tuple[int, Any, Any, Any]] = []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(instructions)
        else:
            instructions.append(item)
    program = []
    for at, (op, jt, jf, k) in enumerate(instructions):
        jt, jf, k = (labels[x] - at - 1 if isinstance(x, str) else x for x in (jt, jf, k))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError(f"a jump of instruction {at} is out of a BPF jump's reach")
        program.append((op, jt, jf, k))
    return program


def _pack(program: list[tuple[int, int, int, int]]) -> bytes:
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


def _keyed(setup: _Setup) -> bytes:
    """The filter with PID 1's key in place of its placeholders."""
    program = bytearray(setup.filter)
    for at, word in zip(setup.key_at, (_key & 0xFFFFFFFF, _key >> 32), strict=True):
        struct.pack_into("I", program, at * 8 + 4, word)
    return bytes(program)


def _install_filter(program: bytes) -> None:
    """Put PID 1 and whatever it starts under the seccomp `program`."""
    filters = ctypes.create_string_buffer(program)
    fprog = struct.pack("HxxxxxxP", len(program) // 8, ctypes.addressof(filters))
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog, 0, 0), "seccomp")


def _init(
    config: dict[str, Any], setup: _Setup, control: socket.socket, disk: int, factory: int
) -> NoReturn:
    """PID 1: boot the sandbox, then serve its control socket until the server closes it."""
    global _key
    try:
        # its own: the key never leaves PID 1's memory, which no process of the sandbox may
        # read (that takes CAP_SYS_PTRACE)
        _key = int.from_bytes(os.urandom(8), "little")
        # from inside, a namespace's init gets only the signals it handles: python handles
        # SIGINT, which would let the sandbox's root end PID 1
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if _parent_pid() != factory:  # the factory died before the request took effect
            os._exit(1)
        _hide_command_line()
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # nothing of the factory's (its socket above all) may reach the sandbox
        start = 3
        for keep in sorted({control.fileno(), disk} - {-1}):
            os.closerange(start, keep)
            start = keep + 1
        os.closerange(start, _MAX_FD)
        # first of all, a handle on PID 1, so that the server can end it whatever happens next
        pidfd = os.pidfd_open(1)
        socket.send_fds(control, [b"started"], [pidfd])
        os.close(pidfd)
        state = _boot(config, setup, control, disk)
    except BaseException as ex:
        try:
            control.send(f"error: {ex}".encode())
        finally:
            os._exit(1)
    try:
        _serve_commands(control, state)
    finally:
        os._exit(0)


# PID 1: commands


def _serve_commands(control: socket.socket, state: _State) -> None:
    wake, woken = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running: dict[int, int] = {}
    """A running command's pid to the write end of its status pipe."""
    poller = select.poll()
    poller.register(control, select.POLLIN)
    poller.register(wake, select.POLLIN)
    sudo = _watch_sudo(poller, state, -1)
    while True:
        for fd, _ in poller.poll():
            if fd == wake:
                os.read(wake, 4096)
                state.handlers.difference_update(_reap(running))
            elif fd == sudo:
                _accept_sudo(state)
            elif not _request(control, running, state):
                return  # the server closed the sandbox
            else:
                sudo = _watch_sudo(poller, state, sudo)  # a reset may have made it anew


def _request(control: socket.socket, running: dict[int, int], state: _State) -> bool:
    """Serve one request (False at end of file)."""
    data, fds = _receive(control, 4096, 5)
    if not data:
        return False
    verb, _, rest = data.partition(b" ")
    if verb == b"spawn" and len(fds) >= 4:
        _spawn(fds, running)
    elif verb == b"signal":
        pid, sig = map(int, rest.split())
        if pid in running:  # not reaped: its group is still the command's
            with contextlib.suppress(ProcessLookupError):  # an empty group: nothing to signal
                os.killpg(pid, sig)
    elif verb == b"reset":
        try:
            _reset(state, rest.decode(), running, control)
        except Exception as ex:  # the server ends the sandbox instead
            control.send(f"error: {ex}".encode())
    return True


# PID 1: a fresh sandbox again


def _reset(state: _State, hostname: str, running: dict[int, int], control: socket.socket) -> None:
    """Make the sandbox again as a fresh one is made, named `hostname`, with this PID 1 and
    the namespaces whose making costs most (PID, network, cgroup): every process ended, what
    commands inherit from PID 1 as it was, a new IPC namespace, /tmp and /dev; a new root if
    a command changed its upper layers (else the root is as fresh as a new one), on new
    upper layers of the same disk; the network made anew if it was used."""
    _end_processes(running)
    state.handlers.clear()
    _restore(state.inherited)
    _check(_call("unshare", _CLONE_NEWIPC), "unshare")
    if state.scratch_only and tuple(_upper(fd) for fd in state.uppers) == state.fresh:
        for path in _SCRATCH:
            _check(_call("umount2", path.encode(), _MNT_DETACH), f"umount {path}")
        _mount_scratch("")
    else:
        # the old root goes with its mount namespace, which nothing holds any more
        _check(_call("setns", state.host, _CLONE_NEWNS), "setns")
        _renew_layers(state)
        _enter_root(state)
    _ready(control, hostname, {"listener": _renew_network(state)})


def _end_processes(running: dict[int, int]) -> None:
    """SIGKILL every process but PID 1 until none is left (each reaped)."""
    deadline = time.monotonic() + _END_SECONDS
    while True:
        _reap(running)
        try:
            os.kill(-1, signal.SIGKILL)  # again each time: a fork may have raced the last
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            raise OSError(errno.EBUSY, f"processes still alive after {_END_SECONDS:g} s")
        time.sleep(0.0005)


def _renew_layers(state: _State) -> None:
    """Put the upper layers and their work directories aside, for the server to remove
    (their space on the disk is the next sandbox's again once it has), and make empty ones."""
    state.layers += 1
    for kind in ("up", "wd"):
        os.rename(f"{state.layer}/{kind}", f"{state.layer}/{kind}.old{state.layers}")
    _make_uppers(state)


def _tell(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):  # the server stopped listening
        os.write(fd, line.encode())


class _NotStarted(Exception):
    """A command that could not start, with why and the exit status a shell would give."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


_WHY_BYTES = 4096
"""The most of why a command could not start that goes to its stderr (a pipe takes 64 KB
at once: PID 1 writes it without waiting)."""


def _spawn(fds: list[int], running: dict[int, int]) -> None:
    request_fd, status, stdout, stderr, *stdin = fds
    try:
        request = marshal.loads(os.pread(request_fd, os.fstat(request_fd).st_size, 0))
        pid = _start(request, stdin[0] if stdin else 0, stdout, stderr)
    except _NotStarted as ex:
        # no process: PID 1 says why on the command's stderr and reports its exit at once
        _tell(stderr, str(ex)[:_WHY_BYTES] + "\n")
        _tell(status, f"pid 0\nexit {ex.code}\n")
        os.close(status)
        return
    except Exception as ex:
        _tell(status, f"error: {ex}\n")
        os.close(status)
        return
    finally:
        for fd in (request_fd, stdout, stderr, *stdin):
            os.close(fd)
    running[pid] = status
    _tell(status, f"pid {pid}\n")


def _start(request: dict[str, Any], stdin: int, stdout: int, stderr: int) -> int:
    """Start a command in its own session with the request's user, directory and environment."""
    argv, env, cwd = request["argv"], request["env"], request["cwd"]
    # posix_spawnp searches the caller's PATH, and resets the child's ids to the real ones
    path = os.environ.get("PATH", os.defpath)
    groups = None
    try:
        os.environ["PATH"] = env.get("PATH", os.defpath)
        groups = _become(request["user"], request["uid"], request["gid"])
        try:
            _enter(cwd, groups is not None)
        except OSError as ex:
            raise _NotStarted(f"cannot change directory to {cwd!r}: {ex.strerror}", 125) from None
        return _spawnp(argv, env, (stdin, stdout, stderr), request.get("tty"))
    finally:
        if groups is not None:
            _become_root(groups)
        os.environ["PATH"] = path
        os.chdir("/")


def _enter(cwd: str, as_user: bool) -> None:
    """Change to `cwd`, refusing what the command's user could not enter on its own."""
    # PID 1 enters as root: `access` checks each component as the real (the command's) user
    allowed = not as_user or os.access(cwd, os.X_OK)
    os.chdir(cwd)
    if not allowed:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))


def _spawnp(
    argv: list[str], env: dict[str, str], stdio: tuple[int, int, int], tty: str | None
) -> int:
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(stdio)]
    if tty is not None:
        # opened by name in its new session (glibc's child calls setsid first), a terminal
        # becomes the session's controlling terminal
        actions.append((os.POSIX_SPAWN_OPEN, 0, tty, os.O_RDWR, 0))
    try:
        return os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=actions,
            setsid=True,
            resetids=True,
            setsigdef=_DEFAULT_SIGNALS,
            # none blocked, whatever the thread that started the server had blocked (a Ray
            # worker's): a terminal's ^C, or a SIGTERM, reaches the command
            setsigmask=(),
        )
    except OSError as ex:
        code = 127 if ex.errno == errno.ENOENT else 126
        raise _NotStarted(f"{argv[0]}: {ex.strerror}", code) from None


def _become(name: str, uid: int, gid: int) -> list[int] | None:
    """Make `uid` PID 1's real user, and `name`'s groups its groups (None for root).

    PID 1 keeps its effective and saved ids (root), so it keeps its privileges: a child
    spawned with `resetids` runs as the user, and `_become_root` undoes this.
    """
    if uid == 0:
        return None
    groups = os.getgroups()
    try:
        os.setgroups(_groups(name, gid))
        os.setresgid(gid, -1, -1)
        os.setresuid(uid, -1, -1)
    except OSError:
        _become_root(groups)
        raise
    return groups


def _groups(name: str, gid: int) -> list[int]:
    """`name`'s groups in the sandbox's /etc/group, read as a plain file.

    Never through the C library's account lookups: they load the modules the sandbox's own
    nsswitch.conf names, from its own root, into PID 1.
    """
    try:
        fd = os.open("/etc/group", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return [gid]
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would never end
            return [gid]
        return groups_of(os.read(fd, 1 << 20).decode(errors="replace"), name, gid)
    finally:
        os.close(fd)


def groups_of(group_file: str, name: str, gid: int) -> list[int]:
    """`name`'s groups: `gid`, and those the text of an /etc/group lists it in."""
    groups = [gid]
    for line in group_file.splitlines():
        entry = line.split(":")
        if len(entry) >= 4 and name in entry[3].split(",") and entry[2].isdigit():
            groups.append(int(entry[2]))
    return groups


def _become_root(groups: list[int]) -> None:
    os.setresuid(0, -1, -1)
    os.setresgid(0, -1, -1)
    os.setgroups(groups)


def _reap(running: dict[int, int]) -> list[int]:
    """Reap every child that has ended, reporting the commands' exits; the pids of the others
    (sudo's handlers, orphans reparented to PID 1)."""
    others: list[int] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return others
        if pid == 0:
            return others
        fd = running.pop(pid, None)
        if fd is None:
            others.append(pid)
        else:
            _tell(fd, f"exit {os.waitstatus_to_exitcode(status)}\n")
            os.close(fd)


# PID 1: sudo

_SUDO_AT_ONCE = 64
"""The most sudo requests served at once, each by a process of its own: more are refused,
so no flood of them reaches PID 1's own work."""
_SUDO_REQUEST_BYTES = 16 << 20
"""The largest request sudo may send (its command line and environment)."""


def _listen_for_sudo(path: str) -> socket.socket:
    """Listen at `path` in a tmpfs of the root's own, made read-only: no process of the
    sandbox, root included (mounts are PID 1's alone), can move or replace it."""
    directory = os.path.dirname(path)
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _mount("tmpfs", directory, "tmpfs", flags, "size=4k,mode=755")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    os.chmod(path, 0o666)  # PID 1 tells who called (SO_PEERCRED), not the file's mode
    listener.listen(_SUDO_AT_ONCE)
    listener.setblocking(False)
    _mount("none", directory, None, _MS_REMOUNT | _MS_RDONLY | flags)
    return listener


def _watch_sudo(poller: select.poll, state: _State, watched: int) -> int:
    """Have `poller` watch the sudo socket instead of `watched`; its descriptor."""
    assert state.sudo is not None
    fd = state.sudo.fileno()
    if fd != watched:
        if watched >= 0:
            poller.unregister(watched)
        poller.register(fd, select.POLLIN)
    return fd


def _accept_sudo(state: _State) -> None:
    """Take every waiting sudo connection: refuse it at once, or fork its handler."""
    assert state.sudo is not None
    while True:
        try:
            connection, _ = state.sudo.accept()
        except (BlockingIOError, InterruptedError):
            return
        with connection:
            connection.setblocking(False)
            try:
                _refuse_sudo(connection, state.setup.uid, len(state.handlers))
                pid = os.fork()
            except OSError as ex:  # refused, or no process to spare (the pids limit)
                with contextlib.suppress(OSError):
                    connection.send(f"error: {ex.strerror or ex}".encode())
                continue
            if pid == 0:
                _handle_sudo(connection)
            state.handlers.add(pid)


def _refuse_sudo(connection: socket.socket, uid: int, serving: int) -> None:
    """OSError with why, unless the caller is root or the user (`uid`) of this sandbox and
    fewer than the most requests are being served."""
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    peer_pid, peer_uid, _ = struct.unpack("3i", credentials)
    if peer_pid == 0:  # its pid namespace is not the sandbox's, nor one below it
        raise PermissionError(errno.EPERM, "sudo serves only the processes of its sandbox")
    if peer_uid not in (0, uid):
        why = f"uid {peer_uid} may not use sudo: only root and the sandbox's user (uid {uid}) may"
        raise PermissionError(errno.EPERM, why)
    if serving >= _SUDO_AT_ONCE:
        why = f"{serving} sudo commands are starting or running already, the most at once"
        raise OSError(errno.EAGAIN, why)


def _handle_sudo(connection: socket.socket) -> NoReturn:
    """A child of PID 1 serving one sudo request: start its command, as PID 1 starts one,
    pass it sudo's signals, and report its exit."""
    try:
        gc.disable()  # a collection could close descriptors of PID 1's it no longer has
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        fd = connection.fileno()
        os.closerange(3, fd)
        os.closerange(fd + 1, _MAX_FD)
        connection.setblocking(True)
        _serve_sudo(connection)
    finally:
        os._exit(0)


def _serve_sudo(connection: socket.socket) -> None:
    _tell(connection.fileno(), "go")
    data, fds = _receive(connection, 64, 4)
    try:
        verb, *size = data.split()
        if verb != b"sudo" or len(fds) != 4 or size[:1] not in ([], [b"tty"]):
            raise ValueError("a request is `sudo` with a memfd, stdin, stdout and stderr")
        request = _sudo_request(fds[0])
        if size:
            pid = _start_on_terminal(connection, request, fds[1], size[1:])
        else:
            pid = _start(request, *fds[1:])
    except _NotStarted as ex:
        _tell(fds[3], str(ex)[:_WHY_BYTES] + "\n")
        _tell(connection.fileno(), f"exit {ex.code}")
        return
    except Exception as ex:
        _tell(connection.fileno(), f"error: {ex}")
        return
    finally:
        for fd in fds:
            os.close(fd)
    _tell(connection.fileno(), f"exit {_wait_sudo(connection, pid)}")


def _start_on_terminal(
    connection: socket.socket, request: dict[str, Any], stdin: int, size: list[bytes]
) -> int:
    """Start the command on a terminal of its own, with the modes of sudo's (`stdin`) and of
    `size` (rows and columns), and hand its other end to sudo, which relays to it."""
    rows, cols = (int(number) for number in size)
    controller, device = os.openpty()
    try:
        with contextlib.suppress(termios.error):  # sudo's stdin is a terminal no longer
            termios.tcsetattr(device, termios.TCSANOW, termios.tcgetattr(stdin))
        fcntl.ioctl(controller, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.fchown(device, request["uid"], -1)  # as login does: the terminal is its user's
        pid = _start({**request, "tty": os.ttyname(device)}, device, device, device)
        fds = struct.pack("i", controller)
        connection.sendmsg([b"tty"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    finally:
        os.close(device)
        os.close(controller)
    return pid


def _sudo_request(fd: int) -> dict[str, Any]:
    """A command's request, as the server's are, read from sudo's memfd (see `_sudo.py`)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or not 0 < info.st_size <= _SUDO_REQUEST_BYTES:
        raise ValueError(f"a request is a file of at most {_SUDO_REQUEST_BYTES} bytes")
    name, uid, gid, cwd, count, *rest = map(os.fsdecode, os.pread(fd, info.st_size, 0).split(b"\0"))
    argv, env = rest[: int(count)], rest[int(count) :]
    if not argv or len(argv) != int(count) or not all("=" in entry for entry in env):
        raise ValueError("the request's command or environment is malformed")
    variables = dict(entry.split("=", 1) for entry in env)
    return {
        "argv": argv,
        "env": variables,
        "cwd": cwd,
        "user": name,
        "uid": int(uid),
        "gid": int(gid),
    }


def _wait_sudo(connection: socket.socket, pid: int) -> int:
    """Pass sudo's signals to the process group of the command `pid` until it ends; its exit
    code. If sudo ends first (it cannot pass on SIGKILL), the group is killed."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(connection, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    while not _ended_fd(pidfd, poller):
        try:
            message = connection.recv(64)
        except OSError:  # sudo is gone
            message = b""
        verb, _, number = message.partition(b" ")
        if not message:
            poller.unregister(connection)
            number = str(int(signal.SIGKILL)).encode()
        elif verb != b"signal" or not number.isdigit() or not 0 < int(number) < signal.NSIG:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, int(number))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _ended_fd(pidfd: int, poller: select.poll) -> bool:
    """Wait for sudo's next message or the command's end; whether it has ended."""
    return any(fd == pidfd for fd, _ in poller.poll())


def main() -> None:
    """Serve as the factory: argv is SANDBOXES SETTINGS FD, SETTINGS the rest of the factory's
    settings (see `_Setup`), marshalled, in hex."""
    sandboxes, settings, fd = sys.argv[1:]
    try:
        setup = _prepare({"sandboxes": sandboxes, **marshal.loads(bytes.fromhex(settings))})
    except OSError as ex:
        _refuse(f"cannot prepare sandboxes: {ex}", int(fd))
    else:
        _serve(setup, int(fd))


def _refuse(reason: str, fd: int) -> None:
    """Answer every request with `reason`, until the server closes `fd`."""
    with socket.socket(fileno=fd) as sock:
        while True:
            data, fds = _receive(sock, 65536, 1)
            if not data or not fds:
                return
            with socket.socket(fileno=fds[0]) as control, contextlib.suppress(OSError):
                control.send(f"error: {reason}".encode())


if __name__ == "__main__":
    main()
