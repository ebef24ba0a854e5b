"""A real Ray cluster for the tests: a head and worker nodes on this machine, all inside a
network namespace the test process makes for itself (only `lo` up), so every Ray address is
loopback and nothing reaches or listens on any other address.

The test process enters the namespace (its main thread, and so every process it starts: the
Ray nodes, the swarm server), and talks to the server there on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

_CLONE_NEWNET = 0x40000000
GIB = 1024**3
_RAY = str(Path(sys.executable).with_name("ray"))
_ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}


def enter_own_network_namespace() -> None:
    """Move this process (its calling thread, and what it starts from now on) into a new
    network namespace with only loopback up."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed: the Ray tests need root")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def own_network_namespace() -> str:
    return os.readlink("/proc/self/ns/net")


@dataclass
class RayCluster:
    """A head (no CPUs: sandboxes go to workers) and worker nodes, each with its own ports."""

    temp_dir: Path
    port: int = field(default_factory=lambda: random.randrange(20000, 30000))
    workers: dict[str, int] = field(default_factory=dict)
    """Each worker's name and node-manager port (which names its raylet)."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_head(self) -> None:
        self._ray_start(
            "--node-ip-address=127.0.0.1",
            "--head",
            "--port",
            str(self.port),
            "--num-cpus",
            "0",
            "--include-dashboard",
            "false",
            "--ray-client-server-port",
            str(self.port + 1),
            "--temp-dir",
            str(self.temp_dir),
        )

    def start_workers(
        self, *names: str, cpus: int = 8, memory_gib: int = 8, ip: str = "127.0.0.1"
    ) -> None:
        """Start worker nodes one after the other (ports picked at once could collide), each
        with `cpus` and `memory_gib` of its own (Ray's logical resources) and a resource named
        after it, on `ip` (an address of this namespace)."""
        for name in names:
            base = self.port + 100 * (len(self.workers) + 1)
            self._ray_start(
                f"--node-ip-address={ip}",
                f"--address={self.address}",
                f"--num-cpus={cpus}",
                f"--memory={memory_gib * GIB}",
                f"--resources={json.dumps({name: 1})}",
                f"--node-manager-port={base}",
                f"--object-manager-port={base + 1}",
                f"--min-worker-port={base + 10}",
                f"--max-worker-port={base + 99}",
            )
            self.workers[name] = base

    def node_id(self, name: str) -> str:
        """The Ray node id of a worker (its raylet's `--node_id`)."""
        port = self.workers[name]
        for pid in namespace_pids():
            args = cmdline(pid).split()
            if f"--node_manager_port={port}" in args:
                return next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
        raise LookupError(f"no raylet for worker {name}")

    def kill_worker(self, name: str) -> None:
        """Kill a worker node as a crash would: its raylet and every process of it, at once."""
        port = self.workers.pop(name)
        for pid in namespace_pids():
            if f"--node_manager_port={port}" in cmdline(pid) or _parent_has(pid, port):
                _kill(pid)

    def stop_worker(self, name: str) -> None:
        """Stop a worker node as `ray stop` would, that node alone: its raylet, told to end,
        tells the head it leaves (a killed one stays alive to the head for a while)."""
        port = self.workers.pop(name)
        raylets = [p for p in namespace_pids() if f"--node_manager_port={port}" in cmdline(p)]
        for pid in raylets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{p}").exists() for p in raylets) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in namespace_pids():
            if _parent_has(pid, port):
                _kill(pid)

    def _ray_start(self, *args: str) -> None:
        process = self._popen(*args)
        if process.wait(timeout=600) != 0:
            raise RuntimeError(
                f"ray start failed: {process.stdout.read() if process.stdout else ''}"
            )

    def _popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                _RAY,
                "start",
                "--object-store-memory=80000000",
                "--disable-usage-stats",
                *args,
            ],
            env=_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def stop(self) -> None:
        """Kill every process in this namespace but this one (all of them the test's)."""
        for pid in namespace_pids():
            _kill(pid)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_cluster() -> RayCluster:
    """A head and two workers, w1 and w2 (every process killed if one fails to start)."""
    cluster = RayCluster(Path(tempfile.mkdtemp(prefix="ray", dir="/tmp")))
    try:
        cluster.start_head()
        cluster.start_workers("w1", "w2")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def namespace_pids() -> list[int]:
    """Every process in this process's network namespace, but this one."""
    ours, pids = own_network_namespace(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if os.readlink(entry / "ns" / "net") == ours:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def agent_of(marker: str) -> dict[int, int]:
    """Each process whose command line begins with `marker` (sandboxes' processes among
    them), and the node agent process it descends from."""
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and cmdline(int(proc.name)).startswith(marker):
            pid = int(proc.name)
            while pid > 1 and not cmdline(pid).startswith("ray::NodeAgent"):
                pid = _parent(pid)
            found[int(proc.name)] = pid
    return found


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 1


def _parent_has(pid: int, port: int) -> bool:
    """Whether a process descends from the raylet of the worker at `port`."""
    seen = 0
    while pid > 1 and seen < 16:
        pid = _parent(pid)
        if f"--node_manager_port={port}" in cmdline(pid):
            return True
        seen += 1
    return False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
