"""Memory, pids and cpu limits per sandbox with cgroups v2, v1, or none.

PID 1 need not be systemd, so the server manages cgroups directly: one child cgroup per
sandbox below the server's own cgroup (per controller on v1). Out-of-memory is judged by the
kernel's `oom_kill` counter, not by exit code 137, which a program can return on its own.

Making and removing a cgroup costs the server about a millisecond per sandbox (more under
load: a v1 memory cgroup is the slowest), so a sandbox's cgroups are kept once it has ended
and emptied, and the next sandbox gets them with its own limits written and the `oom_kill`
counter read afresh. At most as many are kept as ever ran at once.

The base caps the processes of all sandboxes at once (`pids.max`), below what the kernel
allows in all (`default_pids_cap`): a sandbox's own cap times the sandboxes running at once
could otherwise take every pid the host has.

A server removes its base cgroups when it stops. One that is killed cannot, so each server
names its bases in a claim, a file under /run/inspect-swarm that it holds locked (`flock`)
for as long as it lives; a starting server removes the bases of every claim nobody holds.
An idle live server's bases are empty too: only the lock tells a dead server's apart.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CgroupMode = Literal["v2", "v1", "none"]

_ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("memory", "pids", "cpu")
_V1_FREEZER = "freezer"
"""Taken when writable: without it, sandboxes run but cannot be paused."""
_CPU_PERIOD_US = 100_000
_CLAIMS = Path("/run/inspect-swarm")
_REMOVE_TRIES = 100
_REMOVE_PAUSE = 0.02
_FREEZE_PAUSE = 0.002
_FREEZE_SECONDS = 10.0


@dataclass(frozen=True)
class Limits:
    """The resources of one sandbox."""

    memory_bytes: int
    vcpus: int
    pids: int = 4096


@dataclass(frozen=True)
class Usage:
    """What a sandbox uses at one moment."""

    cpu_seconds: float
    """CPU time its processes have used, in all."""
    memory: int
    """Memory in use, page cache included, in bytes."""
    cache: int
    """Of that, page cache, in bytes."""
    disk: int = 0
    """Its disk's bytes in use (0 where it has no disk of its own)."""
    disk_total: int = 0


def default_pids_cap() -> int:
    """A quarter of the processes the kernel allows in all (the smaller of `kernel.pid_max`
    and `kernel.threads-max`), so that even three servers on one host leave it a quarter."""
    limits = []
    for name in ("pid_max", "threads-max"):
        with contextlib.suppress(OSError, ValueError):
            limits.append(int(Path(f"/proc/sys/kernel/{name}").read_text()))
    return max(1, min(limits, default=32768) // 4)


def _own_cgroups() -> dict[str, str]:
    """Controller (or "" for the v2 hierarchy) to the server's cgroup path."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


class Cgroups:
    """Creates and removes per-sandbox cgroups under a base of the server's own."""

    def __init__(self, mode: CgroupMode, bases: dict[str, Path]) -> None:
        self.mode: CgroupMode = mode
        self._bases = bases
        self._idle: dict[Limits, list[SandboxCgroup]] = {}
        """Emptied cgroups of ended sandboxes, for the next ones of the same size (a lower
        memory limit would have the kernel reclaim what the last one left, at once)."""
        self._made = 0
        self._lock = threading.Lock()
        """Sandboxes' cgroups are made and given back on worker threads."""
        self._claim: _Claim | None = None

    @classmethod
    def detect(cls, name: str = "inspect-swarm") -> Cgroups:
        """The best cgroup layout this process can write to ("none" if there is none)."""
        if os.geteuid() != 0:
            return cls("none", {})
        own = _own_cgroups()
        v2 = _ROOT / own.get("", "/").lstrip("/")
        if "memory" in _controllers(_ROOT) and _writable(v2):
            with contextlib.suppress(OSError):
                return cls("v2", {"": _v2_base(v2, name)})._claimed()
        bases = {c: _ROOT / c / own.get(c, "/").lstrip("/") / name for c in _V1_CONTROLLERS}
        if all(_writable(base.parent) for base in bases.values()):
            freezer = _ROOT / _V1_FREEZER / own.get(_V1_FREEZER, "/").lstrip("/")
            if _writable(freezer):
                bases[_V1_FREEZER] = freezer / name
            for base in bases.values():
                base.mkdir(exist_ok=True)
            return cls("v1", bases)._claimed()
        return cls("none", {})

    def _claimed(self) -> Cgroups:
        with contextlib.suppress(OSError):  # nowhere to claim: a killed server's bases stay
            self._claim = _Claim.make(self._bases)
        return self

    def cap_pids(self, most: int) -> None:
        """Cap the processes of all sandboxes at once at `most` (OSError if it cannot)."""
        if self.mode != "none":
            _write(self._bases["" if self.mode == "v2" else "pids"] / "pids.max", str(most))

    def remove_all(self) -> bool:
        """Kill and remove every sandbox cgroup under this server's base (an earlier run's too).

        False when some would not go (processes that would not die).
        """
        self._idle.clear()
        names = {
            path.name
            for base in self._bases.values()
            if base.is_dir()
            for path in base.iterdir()
            if path.is_dir()
        }
        removed = True
        for name in sorted(names):
            group = SandboxCgroup(self.mode, {c: base / name for c, base in self._bases.items()})
            removed = _kill_and_remove(group) and removed
        return removed

    def remove_base(self) -> None:
        """Remove this server's idle cgroups and (empty) base cgroups when it stops."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for groups in idle.values():
            for group in groups:
                group.remove()
        removed = _remove_dirs(self._bases.values())
        if self._claim is not None:
            # what is left (a sandbox that would not die) is the next server's to remove
            self._claim.release(removed)
            self._claim = None

    def sweep(self) -> None:
        """Remove the bases of servers that died without removing them (never a live one's)."""
        if self.mode == "none":
            return
        live, dead = _Claim.scan()
        for claim in dead:
            # a live server on the same state directory has the same bases
            bases = {c: base for c, base in claim.bases.items() if base not in live}
            removed = False
            with contextlib.suppress(OSError):  # what stays is the next server's to remove
                removed = Cgroups(self.mode, bases).remove_all() and _remove_dirs(bases.values())
            claim.release(removed)

    def create(self, limits: Limits) -> SandboxCgroup:
        """The cgroups of one sandbox (an idle one's, or new ones) with its limits set."""
        if self.mode == "none":
            return SandboxCgroup("none", {})
        while group := self._idle_one(limits):
            try:
                group.apply(limits)
                return group
            except OSError:  # removed or broken since: make new ones
                group.remove()
        with self._lock:
            self._made += 1
            name = f"sandbox-{self._made}"
        dirs = {c: base / name for c, base in self._bases.items()}
        for path in dirs.values():
            path.mkdir(exist_ok=True)
        group = SandboxCgroup(self.mode, dirs)
        group.apply(limits)
        return group

    def recycle(self, group: SandboxCgroup) -> bool:
        """Keep an ended sandbox's cgroups for the next one, if empty (else False)."""
        if group.mode == "none":
            return True
        if group.pids() or group.limits is None:
            return False
        with self._lock:
            self._idle.setdefault(group.limits, []).append(group)
        return True

    def _idle_one(self, limits: Limits) -> SandboxCgroup | None:
        with self._lock:
            idle = self._idle.get(limits)
            return idle.pop() if idle else None


def _kill_and_remove(group: SandboxCgroup) -> bool:
    # a killed process leaves its cgroup a moment after it dies
    for _ in range(_REMOVE_TRIES):
        group.kill_all()
        if group.remove():
            return True
        time.sleep(_REMOVE_PAUSE)
    return False


def _remove_dirs(paths: Iterable[Path]) -> bool:
    removed = True
    for path in paths:
        try:
            path.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            removed = False
    return removed


@dataclass
class _Claim:
    """A server's claim on its base cgroups: a file naming them, locked while it lives."""

    path: Path
    fd: int
    bases: dict[str, Path]

    @classmethod
    def make(cls, bases: dict[str, Path]) -> _Claim:
        """Claim `bases` for this process, for as long as it lives."""
        _CLAIMS.mkdir(mode=0o700, exist_ok=True)
        while True:
            path = _CLAIMS / f"{os.getpid()}-{secrets.token_hex(4)}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            # a starting server may have taken the new, empty file for a dead server's
            if os.fstat(fd).st_nlink:
                break
            os.close(fd)
        os.write(fd, "".join(f"{c} {base}\n" for c, base in bases.items()).encode())
        return cls(path, fd, bases)

    @classmethod
    def scan(cls) -> tuple[set[Path], list[_Claim]]:
        """The bases of live servers, and the claims of dead ones (locked, until released)."""
        live: set[Path] = set()
        dead: list[_Claim] = []
        with contextlib.suppress(OSError):
            for path in _CLAIMS.iterdir():
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                except OSError:
                    continue  # released meanwhile
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    live.update(_claimed_bases(fd).values())
                    os.close(fd)
                    continue
                if os.fstat(fd).st_nlink:
                    dead.append(cls(path, fd, _claimed_bases(fd)))
                else:  # another starting server removed it meanwhile
                    os.close(fd)
        return live, dead

    def release(self, remove: bool) -> None:
        """Give the claim up (and remove it, once its bases are gone)."""
        if remove:
            self.path.unlink(missing_ok=True)
        os.close(self.fd)


def _claimed_bases(fd: int) -> dict[str, Path]:
    text = os.pread(fd, 65536, 0).decode(errors="replace")
    pairs = (line.split(" ", 1) for line in text.splitlines() if " " in line)
    return {controller: Path(base) for controller, base in pairs}


def _controllers(path: Path) -> list[str]:
    try:
        return (path / "cgroup.controllers").read_text().split()
    except OSError:
        return []


def _v2_base(own: Path, name: str) -> Path:
    """A v2 parent that may delegate controllers: the server moves into a leaf first."""
    base = own / name
    leaf = own / "server"
    base.mkdir(exist_ok=True)
    if (own / "cgroup.procs").read_text().strip():
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (own / "cgroup.subtree_control").write_text("+memory +pids +cpu\n")
    (base / "cgroup.subtree_control").write_text("+memory +pids +cpu\n")
    return base


class SandboxCgroup:
    """The cgroups of one sandbox (one directory on v2, one per controller on v1)."""

    def __init__(self, mode: CgroupMode, dirs: dict[str, Path]) -> None:
        self.mode: CgroupMode = mode
        self._dirs = dirs
        self._oom_kills_before = 0
        """The `oom_kill` counter when the cgroup was given to its sandbox."""
        self.limits: Limits | None = None

    @property
    def procs_files(self) -> list[Path]:
        """The `cgroup.procs` files a process writes to join this sandbox."""
        return [d / "cgroup.procs" for d in self._dirs.values()]

    def _file(self, controller: str, name: str) -> Path:
        return self._dirs["" if self.mode == "v2" else controller] / name

    def apply(self, limits: Limits) -> None:
        """Write the memory, pids and cpu limits (and start counting OOM kills from here)."""
        self.count_from_now()
        quota = f"{limits.vcpus * _CPU_PERIOD_US}"
        if self.mode == "v2":
            writes = [
                ("memory", "memory.max", f"{limits.memory_bytes}", True),
                ("memory", "memory.swap.max", "0", False),
                ("pids", "pids.max", f"{limits.pids}", True),
                ("cpu", "cpu.max", f"{quota} {_CPU_PERIOD_US}", False),
            ]
        elif self.mode == "v1":
            # memory+swap may never be under memory alone: raise it first, lower it last
            memory = [
                ("memory", "memory.memsw.limit_in_bytes", "-1", False),
                ("memory", "memory.limit_in_bytes", f"{limits.memory_bytes}", True),
                ("memory", "memory.memsw.limit_in_bytes", f"{limits.memory_bytes}", False),
            ]
            writes = [
                *memory,
                ("pids", "pids.max", f"{limits.pids}", True),
                ("cpu", "cpu.cfs_period_us", f"{_CPU_PERIOD_US}", False),
                ("cpu", "cpu.cfs_quota_us", quota, False),
            ]
        else:
            writes = []
        for controller, name, value, required in writes:
            try:
                _write(self._file(controller, name), value)
            except OSError:
                if required:
                    raise
        self.limits = limits

    def count_from_now(self) -> None:
        """Count OOM kills from here on: the cgroups serve a new sandbox."""
        self._oom_kills_before = self._oom_kill_counter()

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory in this sandbox."""
        return self._oom_kill_counter() - self._oom_kills_before

    def _oom_kill_counter(self) -> int:
        if self.mode == "none":
            return 0
        name = "memory.events" if self.mode == "v2" else "memory.oom_control"
        try:
            text = _read(self._file("memory", name))
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def usage(self) -> Usage:
        """The CPU time and memory its processes use (zeros without cgroups)."""
        if self.mode == "none":
            return Usage(0.0, 0, 0)
        v2 = self.mode == "v2"
        memory = int(
            _read(self._file("memory", "memory.current" if v2 else "memory.usage_in_bytes"))
        )
        stat = _fields(_read(self._file("memory", "memory.stat")))
        cache = stat.get("file" if v2 else "total_cache", stat.get("cache", 0))
        if v2:
            cpu = _fields(_read(self._file("cpu", "cpu.stat"))).get("usage_usec", 0) / 1e6
        else:  # the cpu controller alone counts no time: the processes' own, then
            cpu = sum(_cpu_seconds(pid) for pid in self.pids())
        return Usage(cpu, memory, cache)

    def pids(self) -> list[int]:
        """Every process in the sandbox."""
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in _read(path).split())
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL every process in the sandbox (a frozen one is thawed to die)."""
        if self.mode == "v2":
            with contextlib.suppress(OSError):
                _write(self._dirs[""] / "cgroup.kill", "1")
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # a kept cgroup must not freeze the next sandbox's processes
        self.thaw()

    def thaw(self) -> None:
        """Thaw its processes, if frozen: a frozen process takes a SIGKILL only once thawed
        (nothing where there is no freezer)."""
        with contextlib.suppress(OSError):
            self.freeze(False)

    def freeze(self, frozen: bool) -> None:
        """Freeze (or thaw) every process of the sandbox and wait until the kernel has:
        frozen processes keep their memory and use no CPU. OSError where the cgroups have
        no freezer."""
        if self.mode == "v2":
            control, value = self._dirs[""] / "cgroup.freeze", "1" if frozen else "0"
            events, shown = self._dirs[""] / "cgroup.events", f"frozen {value}"
        elif _V1_FREEZER in self._dirs:
            control = events = self._dirs[_V1_FREEZER] / "freezer.state"
            value = shown = "FROZEN" if frozen else "THAWED"
        else:
            raise OSError(errno.EOPNOTSUPP, "these cgroups have no freezer")
        _write(control, value)
        deadline = time.monotonic() + _FREEZE_SECONDS
        while shown not in _read(events).splitlines():
            if time.monotonic() > deadline:
                raise OSError(errno.EBUSY, "the kernel did not finish freezing the sandbox")
            time.sleep(_FREEZE_PAUSE)

    def remove(self) -> bool:
        """Remove the (empty) cgroups; False while processes remain."""
        return _remove_dirs(self._dirs.values())


def _fields(text: str) -> dict[str, int]:
    """A cgroup file of `name value` lines."""
    pairs = (line.split() for line in text.splitlines())
    return {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2 and pair[1].isdigit()}


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """The CPU time a process and its reaped children used (0 once it is gone)."""
    try:
        fields = _read(Path(f"/proc/{pid}/stat")).rpartition(")")[2].split()
    except OSError:
        return 0.0
    # after the name: state is field 3; utime, stime, cutime, cstime are 14 to 17
    return sum(int(value) for value in fields[11:15]) / _TICKS


# cgroup files are small and written often: without the text layer of `open`


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)
