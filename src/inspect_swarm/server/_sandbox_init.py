"""The factory of namespace sandboxes and each sandbox's PID 1. Stdlib only: runs outside the package.

The server starts this file once, as `python -I -S _sandbox_init.py SANDBOXES BASE USER UID
FD`, and sends each sandbox's config over the SOCK_SEQPACKET socket FD together with the
sandbox's end of a SOCK_SEQPACKET socket pair, its control socket. Forking this small, running
interpreter costs about half a millisecond where starting one costs 10-20 ms; every page it
holds makes a fork dearer, so it imports little (configs and requests come as `marshal` data:
both ends run the same interpreter, and `json` would pull in `re`).

The factory lives in a mount namespace of its own that receives the host's mounts but sends
none back, where it keeps the base layer: a small read-only tmpfs at BASE with the account
USER added to copies of the host's /etc/passwd and /etc/group and its home, laid over the
host's root in every sandbox, so no sandbox copies those files up at boot. (Accounts added on
the host later reach new sandboxes once the server restarts.)

Per sandbox the factory forks PID 1 straight into a new PID namespace, and PID 1 unshares new
mount, UTS, IPC and (usually) network namespaces, joins the sandbox's cgroups, builds its root
(an overlay over the base layer and the host's root) and then serves its control socket: it
starts commands with `posix_spawn` (no exec chain: each gets its session, user, directory,
environment and pipes from PID 1 directly), signals their process groups, and reports each
one's exit. Each of these processes dies with its parent (PR_SET_PDEATHSIG), PID 1 also when
the server closes its control socket, and PID 1 keeps no descriptor of the factory's, so
killing the server ends every sandbox and a sandbox cannot reach the factory.

Config: {"dir": the sandbox's directory in SANDBOXES, "hostname", "masks": [paths], "shares":
[paths], "loopback": bool, "cgroups": [cgroup.procs files], "listen": (port, ipv6) or None}.
The control socket then gets `started` from PID 1 with a pidfd of PID 1, then `ready` (with a
socket listening on `listen` inside the sandbox's network, if asked) or `error: ...`; or only
`error: ...` from the factory.

Requests on the control socket: `spawn` with descriptors [request, status, stdout, stderr,
stdin?], the request a memfd holding {"argv", "env", "cwd", "user", "uid", "gid"} (argv may
be megabytes); `signal PID SIG` sends SIG to the process group of a command still running;
`reset HOSTNAME` makes the sandbox anew for a run's next command (`_reset`: a fraction of a
boot's cost, most of which is the PID and network namespaces and the fork of PID 1), then
answers as a boot does, `ready` (with a new listener if the network was made anew) or
`error: ...`, after which the server ends the sandbox.
PID 1 writes `pid N` (N as seen inside the sandbox) to the status pipe, then `exit CODE`
(negative: killed by that signal) once it has reaped the command. A command that cannot
start is a process that says why on its stderr and exits 127 (no such program), 126 (not
executable) or 125 (no such directory, or one its user may not enter), as `env` would. As
after any `posix_spawn` of glibc, commands start with glibc's two internal signals (32 and 33)
ignored, until a program that uses them sets them. PID 1 ignores SIGINT, the one signal
python would have it handle: no signal sent from inside the sandbox can end it. Commands,
root's included, run with Docker's default capabilities less CAP_MKNOD: PID 1 drops the rest
from its bounding set once the sandbox is built, and cannot use the kernel's keyrings (a
seccomp filter). As in Docker, the kernel's tunables under /proc/sys and the like are
read-only, and what /proc and /sys tell of the host's kernel memory, keys, timers and
firmware is hidden.
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
# glibc has no pivot_root(); its number on x86_64, and in the table aarch64 and riscv64 share
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(os.uname().machine, -1)
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
# what a command run as root keeps: Docker's default set, less CAP_MKNOD (no device cgroup
# here would stop a block device made with it); CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH,
# CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE and the rest would each reach past the sandbox
_KEPT_CAPABILITIES = frozenset(
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
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MAX_FD = os.sysconf("SC_OPEN_MAX")
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


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
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


def _append(base: str, path: str, line: str) -> None:
    """Lay the host's `path` with `line` added into the base layer."""
    _copy_dir(base, os.path.dirname(path))
    with open(path) as host, open(base + path, "w") as copy:
        content = host.read()
        copy.write(content + ("\n" if content and not content.endswith("\n") else "") + line)
        info = os.fstat(host.fileno())
        os.fchmod(copy.fileno(), info.st_mode & 0o7777)
        os.fchown(copy.fileno(), info.st_uid, info.st_gid)


def _add_user(base: str, name: str, uid: int) -> None:
    with open("/etc/passwd") as passwd:
        entries = [line.split(":") for line in passwd if line.count(":") >= 6]
    if any(entry[0] == name for entry in entries):
        return
    taken = {int(entry[2]) for entry in entries if entry[2].isdigit()}
    while uid in taken:
        uid += 1
    home = f"/home/{name}"
    _append(base, "/etc/passwd", f"{name}:x:{uid}:{uid}::{home}:/bin/bash\n")
    _append(base, "/etc/group", f"{name}:x:{uid}:\n")
    _copy_dir(base, "/home")
    os.mkdir(base + home, 0o755)
    os.chown(base + home, uid, uid)


def _prepare(base: str, name: str, uid: int) -> None:
    """Enter the factory's own mount namespace and mount the base layer there."""
    if _SYS_PIVOT_ROOT < 0:
        machine = os.uname().machine
        raise OSError(errno.ENOSYS, f"pivot_root's number on {machine} is not known here")
    _check(_libc.unshare(_CLONE_NEWNS), "unshare")
    _mount("none", "/", None, _MS_REC | _MS_SLAVE)
    os.makedirs(base, exist_ok=True)
    _mount("tmpfs", base, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755")
    _add_user(base, name, uid)
    _mount("none", base, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _serve(sandboxes: str, base: str, fd: int) -> None:
    """Fork PID 1 for every config received on `fd`, until the server closes it."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps every PID 1
    factory = os.getpid()
    own_pids = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    gc.freeze()  # a collection in a child would touch, and so copy, every page
    with socket.socket(fileno=fd) as sock:
        while True:
            data, fds = _receive(sock, 65536, 1)
            if not data or not fds:
                return
            with socket.socket(fileno=fds[0]) as control:
                try:
                    config = marshal.loads(data)
                    if os.path.dirname(config["dir"]) != sandboxes:
                        raise ValueError(f"{config['dir']!r} is not under {sandboxes}")
                    _fork_init(config, base, control, factory, own_pids)
                except Exception as ex:  # the factory serves on, whatever one request did
                    with contextlib.suppress(OSError):
                        control.send(f"error: {ex}".encode())


def _fork_init(
    config: dict[str, Any], base: str, control: socket.socket, factory: int, own: int
) -> None:
    """Fork PID 1 of a new PID namespace (the factory stays in its own)."""
    _check(_libc.unshare(_CLONE_NEWPID), "unshare")
    try:
        if os.fork() == 0:
            _init(config, base, control, factory)
    finally:
        _check(_libc.setns(own, _CLONE_NEWPID), "setns")


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
    """Hide `path` (a directory under an empty read-only tmpfs, a file under /dev/null);
    where it mounted, if it did."""
    # the overlay shows the host's root as the host resolves it: a mask at or below a link
    # must cover where the link leads (resolved here, the link would lead out of `root`)
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            target = root + os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
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


def _bind_read_only(source: str, target: str) -> None:
    _mount(source, target, None, _MS_BIND)
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC
    _mount("none", target, None, flags)


def _mount_overlay(base: str, root: str) -> None:
    # volatile (Linux 5.10+) skips the syncs of a throwaway upper layer: copy-ups are ten
    # times faster, and ending the sandbox does not sync the whole disk
    options = f"lowerdir={base}:/,upperdir={root}/up,workdir={root}/wd"
    try:
        _mount("overlay", root, "overlay", 0, options + ",volatile")
    except OSError:
        _mount("overlay", root, "overlay", 0, options)


_SCRATCH = ("/tmp", "/dev")
"""The mounts of a root that a command can change: made anew with each sandbox."""


def _mount_scratch(root: str) -> None:
    _mount("tmpfs", root + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    _mount_dev(root)


def _build_root(config: dict[str, Any], base: str) -> bool:
    """Build the sandbox's root and pivot into it; whether only its own mounts are in
    /tmp and /dev (no share or mask), so that making those anew makes the root anew."""
    # the overlay covers the sandbox's own directory, which holds its upper and work dirs
    root = config["dir"]
    _mount_overlay(base, root)
    _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("sysfs", root + "/sys", "sysfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount_scratch(root)
    for path in _READ_ONLY:
        if os.path.exists(root + path):
            _bind_read_only(root + path, root + path)
    targets = [_mask(root, path) for path in (*_HIDDEN, *config["masks"])]
    for path in config["shares"]:
        os.makedirs(root + path, exist_ok=True)
        _mount(path, root + path, None, _MS_BIND | _MS_REC)
        targets.append(root + path)
    # pivot_root(".", ".") stacks the old root under the new one, so no directory is needed
    os.chdir(root)
    _check(_libc.syscall(_SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", _MNT_DETACH), "umount old root")
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


def _parent_pid() -> int:
    # getppid() says 0 in a new PID namespace: ask the host's /proc, still mounted here
    with open("/proc/self/stat") as own:
        return int(own.read().rpartition(")")[2].split()[1])


class _State:
    """What PID 1 keeps to make its sandbox anew."""

    def __init__(self, config: dict[str, Any], base: str) -> None:
        self.config = config
        self.base = base
        self.host = -1
        """The mount namespace PID 1 made first: the host's mounts, private."""
        self.up = -1
        """The upper layer's directory, under the root mounted on it."""
        self.layer: tuple[object, ...] = ()
        """The upper layer once the root was built on it (a layer still so is kept)."""
        self.scratch_only = False
        """Whether making /tmp and /dev anew makes the root anew (see `_build_root`)."""
        self.inherited: tuple[dict[int, tuple[int, int]], bytes] = ({}, b"")
        """What commands get from PID 1 and can change in it: its resource limits (as
        `prlimit --pid 1` does) and OOM score adjustment (through /proc/1)."""
        self.network = b""
        """The network namespace's counters when it was made (unchanged, it was not used)."""
        self.layers = 0
        """How many upper layers were put aside (numbering them)."""


def _boot(config: dict[str, Any], base: str, control: socket.socket) -> _State:
    """Enter the sandbox's namespaces and cgroups, build its root, and say `ready`."""
    flags = _CLONE_NEWNS | _CLONE_NEWUTS | _CLONE_NEWIPC
    if config["loopback"]:
        flags |= _CLONE_NEWNET
    _check(_libc.unshare(flags), "unshare")
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    state = _State(config, base)
    state.host = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    root = config["dir"]
    for path in (root, root + "/up", root + "/wd"):
        os.mkdir(path)
    for procs in config["cgroups"]:
        with open(procs, "w") as file:
            file.write("0\n")
    _enter_root(state)
    listener = _network(state)
    state.inherited = _inherited()
    _drop_capabilities()
    _refuse_keyrings()
    _ready(control, config["hostname"], listener)
    return state


def _enter_root(state: _State) -> None:
    """Build the sandbox's root in a new mount namespace made from the host's, and enter it."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare")
    if state.up >= 0:
        os.close(state.up)
    state.up = os.open(state.config["dir"] + "/up", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    state.scratch_only = _build_root(state.config, state.base)
    state.layer = _layer(state.up)


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
    _check(_libc.unshare(_CLONE_NEWNET), "unshare")
    return _network(state)


def _ready(control: socket.socket, hostname: str, listener: socket.socket | None) -> None:
    name = hostname.encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    if listener is None:
        control.send(b"ready")
    else:
        with listener:
            socket.send_fds(control, [b"ready"], [listener.fileno()])


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


def _layer(fd: int) -> tuple[object, ...]:
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
        if capability not in _KEPT_CAPABILITIES:
            _check(_libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), "drop a capability")


# the kernel's keyrings are not namespaced: root in every sandbox would share the host
# root's user keyring (`keyctl`, `add_key`, `request_key`), as Docker's seccomp profile keeps
# containers from doing; the calls' numbers per architecture a process may call with
# (x86_64 with its x32 numbers, i386, aarch64, riscv64)
_X32 = 0x40000000
_KEYRING_CALLS = {
    0xC000003E: (248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250),
    0x40000003: (286, 287, 288),
    0xC00000B7: (217, 218, 219),
    0xC00000F3: (217, 218, 219),
}
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000


def _keyring_filter() -> list[tuple[int, int, int, int]]:
    """The seccomp program (code, jt, jf, k) that refuses the keyring calls with EPERM."""
    program: list[tuple[int, int, int, int]] = []
    for arch, calls in _KEYRING_CALLS.items():
        # [load arch, arch?, load call, call? x n, allow, refuse]: the next arch is n + 3 on
        program += [(_BPF_LD_W_ABS, 0, 0, 4), (_BPF_JEQ_K, 0, len(calls) + 3, arch)]
        program += [(_BPF_LD_W_ABS, 0, 0, 0)]
        program += [(_BPF_JEQ_K, len(calls) - i, 0, call) for i, call in enumerate(calls)]
        program += [(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW)]
        program += [(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM)]
    return [*program, (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW)]


def _refuse_keyrings() -> None:
    """Have the kernel refuse the keyring calls, with EPERM, to PID 1 and all it starts."""
    program = _keyring_filter()
    code = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    filters = ctypes.create_string_buffer(code)
    fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(filters))
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog, 0, 0), "seccomp")


def _init(config: dict[str, Any], base: str, control: socket.socket, factory: int) -> NoReturn:
    """PID 1: boot the sandbox, then serve its control socket until the server closes it."""
    try:
        # from inside, a namespace's init gets only the signals it handles: python handles
        # SIGINT, which would let the sandbox's root end PID 1
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if _parent_pid() != factory:  # the factory died before the request took effect
            os._exit(1)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # nothing of the factory's (its socket above all) may reach the sandbox
        keep = control.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, _MAX_FD)
        # first of all, a handle on PID 1, so that the server can end it whatever happens next
        pidfd = os.pidfd_open(1)
        socket.send_fds(control, [b"started"], [pidfd])
        os.close(pidfd)
        state = _boot(config, base, control)
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
    while True:
        for fd, _ in poller.poll():
            if fd == wake:
                os.read(wake, 4096)
                _reap(running)
            elif not _request(control, running, state):
                return  # the server closed the sandbox


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
    the namespaces whose making costs most (PID, network): every process ended, what
    commands inherit from PID 1 as it was, a new IPC namespace, /tmp and /dev; a new root if
    a command changed its upper layer (else the root is as fresh as a new one); the network
    made anew if it was used."""
    _end_processes(running)
    _restore(state.inherited)
    _check(_libc.unshare(_CLONE_NEWIPC), "unshare")
    if state.scratch_only and _layer(state.up) == state.layer:
        for path in _SCRATCH:
            _check(_libc.umount2(path.encode(), _MNT_DETACH), f"umount {path}")
        _mount_scratch("")
    else:
        # the old root goes with its mount namespace, which nothing holds any more
        _check(_libc.setns(state.host, _CLONE_NEWNS), "setns")
        _renew_layer(state)
        _enter_root(state)
    _ready(control, hostname, _renew_network(state))


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


def _renew_layer(state: _State) -> None:
    """Put the upper layer aside, for the server to remove, and make an empty one; keep the
    work directory (the next mount empties it) but for the marker a volatile overlay leaves,
    which would make that mount fail."""
    state.layers += 1
    up = state.config["dir"] + "/up"
    os.rename(up, f"{up}.old{state.layers}")
    os.mkdir(up)
    marker = state.config["dir"] + "/wd/work/incompat/volatile"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker + "/dirty")
        os.rmdir(marker)
        os.rmdir(os.path.dirname(marker))


def _tell(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):  # the server stopped listening
        os.write(fd, line.encode())


def _spawn(fds: list[int], running: dict[int, int]) -> None:
    request_fd, status, stdout, stderr, *stdin = fds
    try:
        request = marshal.loads(os.pread(request_fd, os.fstat(request_fd).st_size, 0))
        pid = _start(request, stdin[0] if stdin else 0, stdout, stderr)
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
            return _failed(f"cannot change directory to {cwd!r}: {ex.strerror}", 125, stderr)
        return _spawnp(argv, env, (stdin, stdout, stderr))
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


def _spawnp(argv: list[str], env: dict[str, str], stdio: tuple[int, int, int]) -> int:
    try:
        return os.posix_spawnp(
            argv[0],
            argv,
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(stdio)],
            setsid=True,
            resetids=True,
            setsigdef=_DEFAULT_SIGNALS,
        )
    except OSError as ex:
        code = 127 if ex.errno == errno.ENOENT else 126
        return _failed(f"{argv[0]}: {ex.strerror}", code, stdio[2])


def _become(name: str, uid: int, gid: int) -> list[int] | None:
    """Make `uid` PID 1's real user, and `name`'s groups its groups (None for root).

    PID 1 keeps its effective and saved ids (root), so it keeps its privileges: a child
    spawned with `resetids` runs as the user, and `_become_root` undoes this.
    """
    if uid == 0:
        return None
    groups = os.getgroups()
    try:
        os.setgroups(os.getgrouplist(name, gid))
        os.setresgid(gid, -1, -1)
        os.setresuid(uid, -1, -1)
    except OSError:
        _become_root(groups)
        raise
    return groups


def _become_root(groups: list[int]) -> None:
    os.setresuid(0, -1, -1)
    os.setresgid(0, -1, -1)
    os.setgroups(groups)


def _failed(message: str, code: int, stderr: int) -> int:
    """A process that says why a command could not start and exits with `code`."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.write(stderr, message.encode() + b"\n")
        finally:
            os._exit(code)
    return pid


def _reap(running: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = running.pop(pid, None)
        if fd is not None:  # else an orphan that was reparented to PID 1
            _tell(fd, f"exit {os.waitstatus_to_exitcode(status)}\n")
            os.close(fd)


def main() -> None:
    """Serve as the factory: argv is SANDBOXES BASE USER UID FD."""
    sandboxes, base, name, uid, fd = sys.argv[1:]
    broken = None
    try:
        _prepare(base, name, int(uid))
    except OSError as ex:
        broken = ex
    if broken is None:
        _serve(sandboxes, base, int(fd))
    else:
        _refuse(f"cannot prepare sandboxes: {broken}", int(fd))


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
