"""The Ray engine's cost: what it adds per sandbox against the local engine, in the same run of
this script, and a run bigger than the cluster, which waits in Ray's queue instead of failing.

Starts a Ray head and two worker nodes (8 CPUs and 8 GiB of Ray's logical resources each) on
this machine, inside a network namespace of this process's own (root; only loopback), then a
server on each engine:

1. N no-op sandboxes (`true`, 1 vCPU and 1 GB each) on each engine, one at a time and then 16
   at a time: the run's wall time (target: Ray at most 2x local), each sandbox's time from
   booting to ended (`startedAt` to `endedAt`) at p50, whose difference is what Ray adds per
   sandbox (target: under 5 ms), and the CPU time per sandbox of the server, the nodes'
   agents (which run the sandboxes), Ray's other workers and its own daemons. One at a
   time, a sandbox's p50 is its own path; 16 at a time on a machine of few cores, it is mostly
   waiting for a core, and the CPU per sandbox says why.
2. Memory pressure: a run whose sandboxes (1 vCPU, 4 GB, sleeping 1 s) ask for twice the
   cluster's memory at once (the server books 64 GiB: Ray holds what does not fit): every
   sandbox succeeds, no more of them at once than the workers hold.

Figures on one machine measure the engine's overhead, not how it scales: every node shares the
same cores.

    .venv/bin/python benchmarks/ray_engine.py [--sandboxes 200]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.ray_cluster import cmdline, enter_own_network_namespace, namespace_pids, start_cluster
from tests.servers import Server, start_server


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run(server: Server, command: str, count: int, size: str, concurrency: int | None) -> Any:
    """Run `count` sandboxes of `command` and wait; the run and its wall time."""
    with server.client() as client:
        began = time.monotonic()
        started = client.swarms.start(command, count=count, size=size, concurrency=concurrency)
        done = client.swarms.wait(started["id"], poll_interval=0.05, timeout=900)
        return done, time.monotonic() - began


def cpu_seconds() -> dict[str, float]:
    """The CPU time so far of each kind of process in this namespace (the sandboxes are in
    namespaces of their own, and count on neither engine)."""
    seconds: dict[str, float] = defaultdict(float)
    tick = os.sysconf("SC_CLK_TCK")
    for pid in namespace_pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        args = cmdline(pid)
        kind = (
            "server"
            if " server " in args
            else "agents"
            if args.startswith("ray::NodeAgent")
            else "workers"
            if args.startswith("ray::")
            else "ray daemons"
        )
        seconds[kind] += (int(fields[11]) + int(fields[12])) / tick
    return seconds


def no_ops(server: Server, count: int, concurrency: int) -> tuple[float, float, dict[str, float]]:
    """The wall time of `count` no-op sandboxes, each one's p50 time, and the CPU time per
    sandbox of each kind of process (all of them succeeded)."""
    before = cpu_seconds()
    done, wall = run(server, "true", count, "1x1", concurrency)
    after = cpu_seconds()
    assert done["counts"]["succeeded"] == count, done["counts"]
    each = [seconds(s["endedAt"]) - seconds(s["startedAt"]) for s in done["sandboxes"]]
    cpu = {k: (after[k] - before.get(k, 0.0)) / count for k in after}
    return wall, statistics.median(each), {k: v for k, v in cpu.items() if v >= 0.00005}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=200)
    args = parser.parse_args()
    enter_own_network_namespace()
    cluster = start_cluster()
    servers: list[Server] = []
    try:
        tmp = Path(tempfile.mkdtemp(prefix="ray-bench-"))
        ray_args = ("--engine", "ray", "--ray-address", cluster.address)
        local = start_server(tmp / "local", "--memory-gib", "16")
        # more than the workers hold: what does not fit waits in Ray's queue, not the server's
        ray = start_server(tmp / "ray", "--memory-gib", "64", *ray_args)
        servers += [local, ray]
        for server in servers:  # warm: sandbox hosts made, Ray's workers started
            no_ops(server, 32, 16)
        for concurrency in (1, 16):
            figures = {}
            for name, server in (("local", local), ("ray", ray)):
                figures[name] = wall, p50, cpu = no_ops(server, args.sandboxes, concurrency)
                shares = ", ".join(f"{k} {v * 1000:.2f}" for k, v in sorted(cpu.items()))
                print(
                    f"{name:5} {args.sandboxes} no-op sandboxes, {concurrency} at a time: "
                    f"{wall:.2f} s, each p50 {p50 * 1000:.1f} ms; CPU ms per sandbox: {shares}"
                )
            (local_wall, local_p50, _), (ray_wall, ray_p50, _) = figures["local"], figures["ray"]
            print(
                f"ray vs local, {concurrency} at a time: {ray_wall / local_wall:.2f}x the run's "
                f"time (target <= 2x), {(ray_p50 - local_p50) * 1000:+.1f} ms per sandbox at p50 "
                "(target < 5 ms)"
            )
        # the cluster's workers hold 16 GiB; 8 sandboxes of 4 GB at once ask for 32
        done, wall = run(ray, "date +%s.%N; sleep 1; date +%s.%N", 8, "1x4", 8)
        sandboxes = done["sandboxes"]
        statuses = Counter(s["status"] for s in sandboxes)
        nodes = {s["node"] for s in sandboxes}
        # when each command ran, by the clock it read in its sandbox (the server marks all
        # of them booting at once, while Ray holds the rest in its queue)
        spans = [tuple(map(float, s["stdoutTail"].split())) for s in sandboxes]
        most = max(sum(1 for b, e in spans if b <= t < e) for t, _ in spans)
        print(
            f"memory pressure: 8 sandboxes of 4 GB on 16 GiB of workers: {dict(statuses)} "
            f"in {wall:.2f} s over {len(nodes)} nodes, at most {most} running at once"
        )
        print("figures on one machine measure overhead, not scaling: the nodes share its cores")
    finally:
        for server in servers:
            server.kill(signal.SIGTERM)
        cluster.stop()


if __name__ == "__main__":
    main()
