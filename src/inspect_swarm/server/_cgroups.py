"""Memory, pids and cpu limits per sandbox with cgroups v2, v1, or none.

PID 1 need not be systemd, so the server manages cgroups directly: one child cgroup per
sandbox below the server's own cgroup (per controller on v1). Out-of-memory is judged by the
kernel's `oom_kill` counter, not by exit code 137, which a program can return on its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CgroupMode = Literal["v2", "v1", "none"]

_ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("memory", "pids", "cpu")
_CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    """The resources of one sandbox."""

    memory_bytes: int
    vcpus: int
    pids: int = 4096


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

    @classmethod
    def detect(cls, name: str = "inspect-swarm") -> Cgroups:
        """The best cgroup layout this process can write to ("none" if there is none)."""
        if os.geteuid() != 0:
            return cls("none", {})
        own = _own_cgroups()
        v2 = _ROOT / own.get("", "/").lstrip("/")
        if "memory" in _controllers(_ROOT) and _writable(v2):
            with contextlib.suppress(OSError):
                return cls("v2", {"": _v2_base(v2, name)})
        bases = {c: _ROOT / c / own.get(c, "/").lstrip("/") / name for c in _V1_CONTROLLERS}
        if all(_writable(base.parent) for base in bases.values()):
            for base in bases.values():
                base.mkdir(exist_ok=True)
            return cls("v1", bases)
        return cls("none", {})

    def leftovers(self) -> list[SandboxCgroup]:
        """The sandbox cgroups that exist under this server's base."""
        names = {
            path.name
            for base in self._bases.values()
            if base.is_dir()
            for path in base.iterdir()
            if path.is_dir()
        }
        return [
            SandboxCgroup(self.mode, {c: base / name for c, base in self._bases.items()})
            for name in sorted(names)
        ]

    def remove_base(self) -> None:
        """Remove this server's (empty) base cgroups when it stops."""
        for base in self._bases.values():
            with contextlib.suppress(OSError):
                base.rmdir()

    def create(self, sandbox_id: str, limits: Limits) -> SandboxCgroup:
        """Make the cgroups of one sandbox with its limits set."""
        if self.mode == "none":
            return SandboxCgroup("none", {})
        dirs = {controller: base / sandbox_id for controller, base in self._bases.items()}
        for path in dirs.values():
            path.mkdir(exist_ok=True)
        group = SandboxCgroup(self.mode, dirs)
        group.apply(limits)
        return group


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

    @property
    def procs_files(self) -> list[Path]:
        """The `cgroup.procs` files a process writes to join this sandbox."""
        return [d / "cgroup.procs" for d in self._dirs.values()]

    def _file(self, controller: str, name: str) -> Path:
        return self._dirs["" if self.mode == "v2" else controller] / name

    def apply(self, limits: Limits) -> None:
        """Write the memory, pids and cpu limits."""
        quota = limits.vcpus * _CPU_PERIOD_US
        if self.mode == "v2":
            d = self._dirs[""]
            (d / "memory.max").write_text(str(limits.memory_bytes))
            with contextlib.suppress(OSError):
                (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(limits.pids))
            with contextlib.suppress(OSError):
                (d / "cpu.max").write_text(f"{quota} {_CPU_PERIOD_US}")
        elif self.mode == "v1":
            self._file("memory", "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            with contextlib.suppress(OSError):
                self._file("memory", "memory.memsw.limit_in_bytes").write_text(
                    str(limits.memory_bytes)
                )
            self._file("pids", "pids.max").write_text(str(limits.pids))
            with contextlib.suppress(OSError):
                self._file("cpu", "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
                self._file("cpu", "cpu.cfs_quota_us").write_text(str(quota))

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory in this sandbox."""
        if self.mode == "none":
            return 0
        name = "memory.events" if self.mode == "v2" else "memory.oom_control"
        try:
            text = self._file("memory", name).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids(self) -> list[int]:
        """Every process in the sandbox."""
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in path.read_text().split())
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL every process in the sandbox."""
        if self.mode == "v2":
            with contextlib.suppress(OSError):
                (self._dirs[""] / "cgroup.kill").write_text("1")
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """Remove the (empty) cgroups; False while processes remain."""
        removed = True
        for path in self._dirs.values():
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
        return removed
