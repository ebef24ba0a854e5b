"""PID 1 of a namespace sandbox: build its root, report ready, then reap children.

Run by the host's interpreter (`python -I -S`) under `unshare`, in fresh PID, mount, UTS,
IPC and (usually) network namespaces. Stdlib only: it runs outside the package.

argv[1] is JSON: {"dir": sandbox dir, "hostname": ..., "masks": [paths], "shares": [paths],
"user": [name, uid], "loopback": bool}.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = 155
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


def _build_root(config: dict[str, object]) -> None:
    base = str(config["dir"])
    root = base + "/m"
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    _mount("overlay", root, "overlay", 0, f"lowerdir=/,upperdir={base}/up,workdir={base}/wd")
    _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("sysfs", root + "/sys", "sysfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("tmpfs", root + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    _mount_dev(root)
    for path in config["masks"]:  # type: ignore[attr-defined]
        _mask(root, str(path))
    for path in config.get("shares", []):  # type: ignore[attr-defined]
        os.makedirs(root + str(path), exist_ok=True)
        _mount(str(path), root + str(path), None, _MS_BIND | _MS_REC)
    os.chdir(root)
    os.makedirs(".oldroot", exist_ok=True)
    _check(_libc.syscall(_SYS_PIVOT_ROOT, b".", b".oldroot"), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.oldroot", _MNT_DETACH), "umount old root")
    os.rmdir("/.oldroot")


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


def _reap_forever() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        signal.sigwait({signal.SIGCHLD})


def main() -> None:
    """Build the sandbox, print `ready` (or the error) on stdout, then reap."""
    config = json.loads(sys.argv[1])
    try:
        _build_root(config)
        _libc.sethostname(str(config["hostname"]).encode(), len(str(config["hostname"])))
        if config.get("loopback", True):
            _loopback_up()
        name, uid = config["user"]
        _add_user(str(name), int(uid))
    except OSError as ex:
        print(f"error: {ex}", flush=True)
        sys.exit(1)
    print("ready", flush=True)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _reap_forever()


if __name__ == "__main__":
    main()
