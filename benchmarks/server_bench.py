"""Swarm server benchmarks (ratios within one run; never run as tests).

    .venv/bin/python benchmarks/server_bench.py [--sandboxes 200] [--clients 50]

1. Sandbox boot p50/p95 (create + first answer of PID 1), and the time to make a sandbox anew
   for a run's next command (`reset`), on the sandbox layer.
2. N no-op sandboxes through a real server at its maximum concurrency, against N plain
   subprocesses (`/bin/sh -c true`) started at the same concurrency (target: at most 3x);
   then N sandboxes and subprocesses that write a file (`echo x > f`), whose sandboxes' roots
   cannot be kept when made anew for the next,
   with the machine's CPU time per sandbox and per subprocess (from /proc/stat, so counting
   whatever else runs meanwhile, and the kernel's deferred work for a moment after).
3. API latency p99 under 50 concurrent clients polling GET /api/swarms/{id} of a run of 10
   sandboxes, then of the last run of N sandboxes, every 0.5 s
   (`--poll-interval`; the SDKs poll every 3 s), each on its own keep-alive connection
   (target: 20 ms).
4. The same under load: 50 clients polling GET /api/swarms/{id} every 0.5 s of a run whose N
   sandboxes each `sleep 3`, all at once, from its start until it completes, on a server with
   N GiB to book; `--rounds` runs one after another (target: p99 under 20 ms). Each poll
   counts in the phase it began in: `booting` (until every sandbox runs), `running` (until
   the first ends) or `ending`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import KEY, start_server

from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost

COMMANDS = (("no-op", "true"), ("file-writing", "echo x > f"))
"""What each sandbox, and each plain subprocess, runs: `f` is in the sandbox's home (its upper
layer changed, the next sandbox of the run gets a new root) or the subprocess's directory."""
_SETTLE_SECONDS = 0.3
"""How long after a batch its deferred kernel work (such as freeing namespaces) is counted."""


def machine_cpu() -> float:
    """Seconds of CPU the whole machine has used (busy time of every core, from /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:8]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_after(start: float) -> float:
    """The machine's CPU seconds since `start`, counting deferred work for a moment."""
    time.sleep(_SETTLE_SECONDS)
    return machine_cpu() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def boot_times(state: Path, n: int) -> tuple[list[float], list[float]]:
    """Seconds to boot a sandbox, and to make one anew for a run's next command (`reset`)."""
    host = SandboxHost(IsolationConfig(state))
    host.reap_leftovers()
    boots, resets = [], []
    for i in range(n):
        start = time.perf_counter()
        sandbox = await host.create(f"sbx-bench{i}", Limits(2**30, 1))
        boots.append(time.perf_counter() - start)
        start = time.perf_counter()
        await sandbox.reset(f"sbx-bench{i}-again")
        resets.append(time.perf_counter() - start)
        await sandbox.close()
    await host.aclose()
    host.cgroups.remove_base()
    return boots, resets


async def plain_subprocesses(n: int, concurrency: int, command: str, cwd: Path) -> float:
    limit = anyio.Semaphore(concurrency)

    async def one() -> None:
        async with limit:
            await anyio.run_process(["/bin/sh", "-c", command], cwd=cwd)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return time.perf_counter() - start


def swarm_of(url: str, n: int, command: str) -> tuple[float, int, str]:
    """Seconds from the start request to the end the server records for the run.

    The run's `endedAt` (this machine's clock) times it, not the polling: a client polling
    a 200-sandbox run every few milliseconds would take a good share of the server's CPU.
    """
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        start = time.time()
        run = http.post(
            "/api/swarms",
            json={"command": command, "count": n, "size": {"vcpus": 1, "memoryGb": 1}},
        ).json()
        while (got := http.get(f"/api/swarms/{run['id']}").json())["status"] != "completed":
            time.sleep(0.25)
        ended = datetime.fromisoformat(got["endedAt"].replace("Z", "+00:00")).timestamp()
        return ended - start, run["concurrency"], run["id"]


class _Poller:
    """One keep-alive HTTP/1.1 connection that GETs one path: a client light enough that the
    latency measured is the server's (httpx spends ~2 ms of CPU per request, and 50 of them in
    one event loop mostly measure each other)."""

    def __init__(self, stream: anyio.abc.SocketStream, host: str, path: str) -> None:
        self._stream = stream
        self._request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n\r\n"
        ).encode()
        self._buffer = b""

    async def get(self) -> int:
        """Send the request and read the whole response; its status."""
        await self._stream.send(self._request)
        while b"\r\n\r\n" not in self._buffer:
            self._buffer += await self._stream.receive()
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers["content-length"])
        while len(self._buffer) < length:
            self._buffer += await self._stream.receive()
        self._buffer = self._buffer[length:]
        return int(lines[0].split()[1])


async def poll_latency(
    url: str,
    run_id: str,
    clients: int,
    polls: int,
    interval: float,
    until: anyio.Event | None = None,
) -> list[tuple[float, float]]:
    """(start, latency) of each poll of the run: `polls` per client, or until `until` is set."""
    latencies: list[tuple[float, float]] = []
    address = httpx.URL(url)
    host, port = address.host, address.port or 80

    async def client(index: int) -> None:
        async with await anyio.connect_tcp(host, port) as stream:
            poller = _Poller(stream, f"{host}:{port}", f"/api/swarms/{run_id}")
            i = 0
            while (until is None and i < polls) or (until is not None and not until.is_set()):
                # clients start spread over one interval, as independent pollers would
                await anyio.sleep(interval * (1 if i else index / clients))
                start = time.perf_counter()
                status = await poller.get()
                latencies.append((start, time.perf_counter() - start))
                assert status == 200
                i += 1

    async with anyio.create_task_group() as tg:
        for index in range(clients):
            tg.start_soon(client, index)
    return latencies


PHASES = ("booting", "running", "ending")
"""A run's phases under load: until all its sandboxes run, until the first ends, until the
last has."""


async def latency_under_load(
    url: str, sandboxes: int, clients: int, interval: float, sleep: float
) -> dict[str, list[float]]:
    """Latencies of `clients` polling a run of `sandboxes` that each `sleep`, all at once,
    from its start until it completes, by the phase each poll began in."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        response = await http.post(
            "/api/swarms",
            json={
                "command": f"sleep {sleep:g}",
                "count": sandboxes,
                "concurrency": sandboxes,
                "size": {"vcpus": 1, "memoryGb": 1},
            },
        )
        run_id = response.json()["id"]
        completed = anyio.Event()
        changes = [time.perf_counter()]
        """When each phase began."""

        async def watch() -> None:
            while True:
                run = (await http.get(f"/api/swarms/{run_id}")).json()
                counts = run["counts"]
                reached = 1 if counts["running"] == sandboxes else 0
                reached = 2 if counts["succeeded"] + counts["failed"] else reached
                while len(changes) <= reached:
                    changes.append(time.perf_counter())
                if run["status"] == "completed":
                    completed.set()
                    return
                await anyio.sleep(0.1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            polls = await poll_latency(url, run_id, clients, 0, interval, completed)
    phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for start, latency in polls:
        phase = sum(1 for change in changes[1:] if change <= start)
        phases[PHASES[phase]].append(latency)
    return phases


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxes", type=int, default=200)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--boots", type=int, default=40)
    parser.add_argument("--memory-gib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="runs of the load scenario (4.)")
    parser.add_argument("--sleep", type=float, default=3.0, help="each sandbox's sleep in 4.")
    parser.add_argument("--only-load", action="store_true", help="run the load scenario only")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.5,
        help="each client's polling interval (the SDKs poll every 3 s)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not args.only_load:
            burst(args, Path(tmp))
        under_load(args, Path(tmp))


def under_load(args: argparse.Namespace, tmp: Path) -> None:
    memory = str(max(args.memory_gib, args.sandboxes))
    server = start_server(tmp / "load", "--memory-gib", memory)
    try:
        phases: dict[str, list[float]] = {phase: [] for phase in PHASES}
        for _ in range(args.rounds):
            run = anyio.run(
                latency_under_load,
                server.url,
                args.sandboxes,
                args.clients,
                args.poll_interval,
                args.sleep,
            )
            for phase, latencies in run.items():
                phases[phase] += latencies
        print(
            f"API GET /api/swarms/{{id}} under {args.clients} polling clients while "
            f"{args.sandboxes} sandboxes sleep {args.sleep:g} s ({args.rounds} runs; "
            "target p99 20 ms):"
        )
        every = [latency for latencies in phases.values() for latency in latencies]
        for phase, latencies in [*phases.items(), ("whole run", every)]:
            if latencies:
                print(
                    f"  {phase}: {len(latencies)} polls, "
                    f"p50 {statistics.median(latencies) * 1000:.1f} ms, "
                    f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, "
                    f"max {max(latencies) * 1000:.1f} ms"
                )
    finally:
        server.kill()


def burst(args: argparse.Namespace, tmp: Path) -> None:
    boots, resets = anyio.run(boot_times, tmp / "boot", args.boots)
    for what, times in (("sandbox boot", boots), ("sandbox made anew", resets)):
        print(
            f"{what}: p50 {percentile(times, 0.5) * 1000:.1f} ms, "
            f"p95 {percentile(times, 0.95) * 1000:.1f} ms ({args.boots} times)"
        )
    server = start_server(tmp / "state", "--memory-gib", str(args.memory_gib))
    try:
        for what, command in COMMANDS:
            start = machine_cpu()
            swarm_time, concurrency, big = swarm_of(server.url, args.sandboxes, command)
            swarm_cpu = cpu_after(start) / args.sandboxes
            start = machine_cpu()
            plain = anyio.run(plain_subprocesses, args.sandboxes, concurrency, command, tmp)
            plain_cpu = cpu_after(start) / args.sandboxes
            print(
                f"{args.sandboxes} {what} sandboxes at concurrency {concurrency}: "
                f"{swarm_time:.2f} s; {args.sandboxes} plain subprocesses: {plain:.2f} s; "
                f"ratio {swarm_time / plain:.1f}x (target <= 3x)"
            )
            print(
                f"  machine CPU per sandbox {swarm_cpu * 1000:.1f} ms, per plain "
                f"subprocess {plain_cpu * 1000:.1f} ms: {swarm_cpu / plain_cpu:.1f}x"
            )
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as http:
            run = http.post(
                "/api/swarms",
                json={"command": "echo hi", "count": 10, "size": {"vcpus": 1, "memoryGb": 1}},
            ).json()
            while http.get(f"/api/swarms/{run['id']}").json()["status"] != "completed":
                time.sleep(0.05)
        for run_id, count in ((run["id"], 10), (big, args.sandboxes)):
            polls = anyio.run(
                poll_latency, server.url, run_id, args.clients, 20, args.poll_interval
            )
            latencies = [latency for _, latency in polls]
            print(
                f"API GET /api/swarms/{{id}} ({count} sandboxes) under {args.clients} "
                f"polling clients: p50 {statistics.median(latencies) * 1000:.1f} ms, "
                f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms (target 20 ms)"
            )
    finally:
        server.kill()
        subprocess.run(["true"], check=True)


if __name__ == "__main__":
    main()
