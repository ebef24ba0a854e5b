"""The web console's benchmarks (ratios within one run; never run as tests).

    .venv/bin/python benchmarks/console_bench.py [--runs 1000] [--sandboxes 5000]

1. The runs page with `--runs` runs in the store (target: rendered in under 300 ms), against
   the API's list of the same runs (`GET /api/swarms`). Each request asks for a page no
   console asked for a moment before, so each is rendered afresh.
2. A run of `--sandboxes` sandboxes: its page (one page of sandboxes, failed first) against
   the API's whole run (`GET /api/swarms/{id}`), in time and bytes.
3. The API's latency (p99 of 50 clients polling a run of 10 sandboxes every 0.5 s; target
   20 ms) alone, then with 20 consoles open on that run's page, each following it over one
   stream as the console's script does (`--rounds` times), with the share of a core the
   server used meanwhile: on a busy machine the p99 is noisy, the CPU less so.

The runs are written to a fresh store before the server starts: completed, so the server
runs none of them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.server_bench import percentile, poll_latency
from tests.servers import KEY, start_server

from inspect_swarm.server.edge._auth import account_of
from inspect_swarm.server.model._types import RunRecord, RunSpec, SandboxInput, Size
from inspect_swarm.server.records._store import Store


def fill(state: Path, runs: int, sandboxes: int) -> tuple[str, str]:
    """Write `runs` completed runs of one sandbox, then one of `sandboxes` (every 100th
    failed) and one of 10; the ids of the last two."""
    state.mkdir(parents=True)
    store = Store(state / "swarm.db")
    now = time.time()
    spec = RunSpec("echo hello", Size(1, 1), 60, "base", None)

    def run(count: int, name: str, failing: int = 0) -> str:
        record = RunRecord(
            uuid.uuid4().hex, account_of(KEY), "/", "lease-bench", name, spec, count, 8, now
        )
        store.insert_run(
            record,
            [SandboxInput()] * count,
            [f"sbx-{uuid.uuid4().hex}" for _ in range(count)],
            None,
        )
        ended = {
            "status": "succeeded",
            "exit_code": 0,
            "stdout_tail": "hello\n",
            "started_at": now,
            "ended_at": now + 0.2,
        }
        store.end_sandboxes(record.id, "queued", ended)
        for idx in range(0, count, failing or count + 1):
            store.update_sandbox(
                record.id, idx, {"status": "failed", "exit_code": 1, "error": "exit code 1"}
            )
        store.update_run(record.id, {"status": "completed", "ended_at": now + 1})
        return record.id

    for i in range(runs):
        run(1, f"run {i}")
    big, small = run(sandboxes, "wide", failing=100), run(10, "small")
    store.close()
    return big, small


def timed(client: httpx.Client, path: str, times: int) -> tuple[list[float], int]:
    """Seconds of each of `times` GETs of `path` (made unique, so none is answered from the
    console's fragments of a moment ago), and the bytes of the last."""
    seconds, size = [], 0
    for i in range(times):
        start = time.perf_counter()
        response = client.get(path, params={"bench": str(i)})
        seconds.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text
        size = len(response.content)
    return seconds, size


def show(label: str, seconds: list[float], size: int) -> None:
    p50, p95 = statistics.median(seconds), percentile(seconds, 0.95)
    print(
        f"  {label:<44} p50 {p50 * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  {size / 1024:8.1f} KiB"
    )


async def consoles_open(console: str, path: str, count: int, until: anyio.Event) -> int:
    """`count` consoles following `path` as the console's script does (one stream each)
    until `until`; how many fragments they were sent."""
    address = httpx.URL(console)
    host, port = address.host, address.port or 80
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    sent = 0

    async def one() -> None:
        nonlocal sent
        async with await anyio.connect_tcp(host, port) as stream:
            await stream.send(request)
            with anyio.move_on_after(3600) as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: _cancel_on(until, scope))
                    while True:
                        data = await stream.receive()  # before `sent` is read: others add too
                        sent += data.count(b"event: fragment")

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return sent


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def api_latency(
    url: str, run_id: str, polls: int, console: str, followed: str, consoles: int
) -> tuple[list[float], int]:
    """Seconds of each of the API's polls of `run_id` with `consoles` consoles following
    `followed` meanwhile, and how many fragments they were sent."""
    until = anyio.Event()
    made = 0

    async def open_consoles() -> None:
        nonlocal made
        made = await consoles_open(console, followed, consoles, until)

    async with anyio.create_task_group() as tg:
        if consoles:
            tg.start_soon(open_consoles)
        latencies = await poll_latency(url, run_id, 50, polls, 0.5)
        until.set()
    return [latency for _, latency in latencies], made


def process_cpu(pid: int) -> float:
    """Seconds of CPU a process has used (user and system, from /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--sandboxes", type=int, default=5000)
    parser.add_argument("--times", type=int, default=30)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2, help="of step 3, one after another")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        big, small = fill(state, args.runs, args.sandboxes)
        server = start_server(state, "--memory-gib", "8")
        ready = json.loads((Path(tmp) / "state.ready").read_text())
        console = ready["consoleUrl"]
        headers = {"Authorization": f"Bearer {KEY}"}
        try:
            with (
                httpx.Client(base_url=server.url, headers=headers, timeout=60) as api,
                httpx.Client(base_url=console, headers=headers, timeout=60) as pages,
            ):
                print(f"1. the runs page, {args.runs + 2} runs in the store")
                show(
                    "console: runs page (GET /fragments/runs)",
                    *timed(pages, "/fragments/runs", args.times),
                )
                show("API: GET /api/swarms (every run)", *timed(api, "/api/swarms", args.times))
                print(f"2. a run of {args.sandboxes} sandboxes")
                show(
                    "console: run page (one page of sandboxes)",
                    *timed(pages, f"/fragments/runs/{big}", args.times),
                )
                show(
                    "API: GET /api/swarms/{id} (every sandbox)",
                    *timed(api, f"/api/swarms/{big}", args.times),
                )
            print("3. API p99 of 50 clients polling a run of 10 sandboxes every 0.5 s")
            for consoles in (0, 20) * args.rounds:
                cpu, began = process_cpu(server.process.pid), time.perf_counter()
                followed = f"/fragments/runs/{small}"
                polled = (server.url, small, args.polls, console, followed, consoles)
                latencies, made = anyio.run(api_latency, *polled)
                p99 = percentile(latencies, 0.99)
                share = (process_cpu(server.process.pid) - cpu) / (time.perf_counter() - began)
                print(
                    f"  with {consoles:>2} consoles open: p99 {p99 * 1000:6.1f} ms, "
                    f"server CPU {share:.0%} of a core ({made} fragments sent)"
                )
        finally:
            server.kill()


if __name__ == "__main__":
    main()
