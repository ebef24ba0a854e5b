"""The factory of namespace sandboxes and each sandbox's PID 1. Stdlib only: runs outside the package.

The server starts this file once, as `python -I -S _sandbox_init.py SANDBOX_DIR FD`, and sends
each sandbox's config over the SOCK_SEQPACKET socket FD together with the write end of a pipe
for the answer. Forking this small, running interpreter costs well under a millisecond where
starting one costs 10-20 ms. Per sandbox the factory forks a keeper, which unshares new mount,
UTS, IPC, PID and (usually) network namespaces and forks the sandbox's PID 1; PID 1 joins the
sandbox's cgroups, builds its root (an overlay over the host's), reports and then reaps
children. Each of these processes dies with its parent (PR_SET_PDEATHSIG) and keeps no
descriptor of the factory, so killing the server ends every sandbox and a sandbox cannot
reach the factory.

Config: {"dir": sandbox dir under SANDBOX_DIR, "hostname", "masks": [paths], "shares": [paths],
"user": [name, uid], "loopback": bool, "cgroups": [cgroup.procs files]}. The answer pipe gets
`pid N` (PID 1's host pid) from the keeper, then `ready` or `error: ...` from PID 1, one line
each (or only `error: ...` from the keeper).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys
from typing import Any, NoReturn

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = 155
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MAX_FD = os.sysconf("SC_OPEN_MAX")
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

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


def _mount_dev(root: str) -> None:
    dev = root + "/dev"
    _mount("tmpfs", dev, "tmpfs", _MS_NOSUID, "mode=755")
    for name in _DEVICES:
        open(f"{dev}/{name}", "w").close()
        _mount(f"/dev/{name}", f"{dev}/{name}", None, _MS_BIND)
    os.mkdir(dev + "/pts")
    _mount("devpts", dev + "/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666")
    os.mkdir(dev + "/shm")
    _mount("tmpfs", dev + "/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    os.symlink("pts/ptmx", dev + "/ptmx")
    os.symlink("/proc/self/fd", dev + "/fd")
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", f"{dev}/{name}")


def _mask(root: str, path: str) -> None:
    target = root + path
    if os.path.isdir(target) and not os.path.islink(target):
        _mount("tmpfs", target, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k,mode=755")
    elif os.path.isfile(target) and not os.path.islink(target):
        _mount("/dev/null", target, None, _MS_BIND)


def _make_private() -> None:
    """Stop mounts propagating between the sandbox and the host (costly: only if shared)."""
    with open("/proc/self/mountinfo") as mountinfo:
        if " shared:" in mountinfo.read():
            _mount("none", "/", None, _MS_REC | _MS_PRIVATE)


def _mount_overlay(base: str, root: str) -> None:
    # volatile (Linux 5.10+) skips the syncs of a throwaway upper layer: copy-ups, such as
    # adding the user to /etc/passwd, are ten times faster
    options = f"lowerdir=/,upperdir={base}/up,workdir={base}/wd"
    try:
        _mount("overlay", root, "overlay", 0, options + ",volatile")
    except OSError:
        _mount("overlay", root, "overlay", 0, options)


def _build_root(config: dict[str, Any]) -> None:
    base = str(config["dir"])
    root = base + "/m"
    _make_private()
    _mount_overlay(base, root)
    _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("sysfs", root + "/sys", "sysfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("tmpfs", root + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    _mount_dev(root)
    for path in config["masks"]:
        _mask(root, str(path))
    for path in config["shares"]:
        os.makedirs(root + str(path), exist_ok=True)
        _mount(str(path), root + str(path), None, _MS_BIND | _MS_REC)
    # pivot_root(".", ".") stacks the old root under the new one, so no directory is needed
    os.chdir(root)
    _check(_libc.syscall(_SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", _MNT_DETACH), "umount old root")
    os.chdir("/")


def _loopback_up() -> None:
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def _add_user(name: str, uid: int) -> None:
    with open("/etc/passwd") as passwd:
        entries = [line.split(":") for line in passwd if line.count(":") >= 6]
    if any(entry[0] == name for entry in entries):
        return
    taken = {int(entry[2]) for entry in entries if entry[2].isdigit()}
    while uid in taken:
        uid += 1
    home = f"/home/{name}"
    with open("/etc/passwd", "a") as passwd:
        passwd.write(f"{name}:x:{uid}:{uid}::{home}:/bin/bash\n")
    with open("/etc/group", "a") as group:
        group.write(f"{name}:x:{uid}:\n")
    os.makedirs(home, exist_ok=True)
    os.chown(home, uid, uid)


def _reap_forever() -> NoReturn:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        signal.sigwait({signal.SIGCHLD})


def _die_with_parent() -> None:
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _init(config: dict[str, Any], answer: int) -> NoReturn:
    """PID 1: join the cgroups, build the sandbox, answer `ready` (or the error), then reap."""
    _die_with_parent()
    try:
        for procs in config["cgroups"]:
            with open(procs, "w") as file:
                file.write("0\n")
        _build_root(config)
        hostname = str(config["hostname"]).encode()
        _check(_libc.sethostname(hostname, len(hostname)), "sethostname")
        if config["loopback"]:
            _loopback_up()
        name, uid = config["user"]
        _add_user(str(name), int(uid))
    except Exception as ex:
        os.write(answer, f"error: {ex}\n".encode())
        os._exit(1)
    os.write(answer, b"ready\n")
    os.close(answer)
    _reap_forever()


def _keeper(config: dict[str, Any], answer: int, factory: int) -> NoReturn:
    """Unshare the namespaces and fork PID 1 into them; live as long as it does."""
    try:
        _die_with_parent()
        if os.getppid() != factory:  # the factory died before the request took effect
            os._exit(1)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        # nothing of the factory's (its socket above all) may reach the sandbox
        os.closerange(3, answer)
        os.closerange(answer + 1, _MAX_FD)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        flags = _CLONE_NEWNS | _CLONE_NEWUTS | _CLONE_NEWIPC | _CLONE_NEWPID
        if config["loopback"]:
            flags |= _CLONE_NEWNET
        _check(_libc.unshare(flags), "unshare")
        pid = os.fork()
        if pid == 0:
            _init(config, answer)
        os.write(answer, f"pid {pid}\n".encode())
        os.close(answer)
        os.waitpid(pid, 0)
    except Exception as ex:
        with contextlib.suppress(OSError):
            os.write(answer, f"error: {ex}\n".encode())
    os._exit(0)


def _serve(sandbox_dir: str, fd: int) -> None:
    """Fork a keeper for every config received on `fd`, until the server closes it."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the keepers
    factory = os.getpid()
    with socket.socket(fileno=fd) as sock:
        while True:
            data, fds, _, _ = socket.recv_fds(sock, 65536, 1)
            if not data or not fds:
                return
            answer = fds[0]
            config = json.loads(data)
            if os.path.dirname(str(config["dir"])) != sandbox_dir:
                os.write(answer, f"error: {config['dir']!r} is not under {sandbox_dir}\n".encode())
            elif os.fork() == 0:
                _keeper(config, answer, factory)
            os.close(answer)


def main() -> None:
    """Serve as the factory: argv is the sandbox directory and the request socket's fd."""
    _serve(sys.argv[1], int(sys.argv[2]))


if __name__ == "__main__":
    main()
