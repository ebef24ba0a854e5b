"""Snapshots and forks through the e2b SDK, against creating a fresh sandbox in the same run.

    .venv/bin/python benchmarks/e2b_snapshot_bench.py [--rounds 5] [--mib 100]

Starts a local swarm server and one E2B sandbox with `--mib` MiB written to its home (on its
disk), then measures, alternating so all see the same load: (1) `create_snapshot()`, which
freezes the sandbox and copies its files; (2) `Sandbox.create(snapshot_id)`, a sandbox made
from that snapshot (the copy put on its new disk, then its boot); (3) `fork()`, the files
copied once, straight onto the fork's disk, and a boot in one call; (4) `Sandbox.create()`,
a fresh sandbox (the baseline). A fork is also set against (1) and (2) together, the two
copies a fork made before it copied once. What each made is killed and deleted outside the
timings. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import time
from collections.abc import Awaitable, Callable

from e2b import AsyncSandbox

from inspect_swarm.sandbox._local_server import LocalServer


async def _timed(call: Callable[[], Awaitable[object]]) -> tuple[float, object]:
    began = time.perf_counter()
    made = await call()
    return time.perf_counter() - began, made


async def _rid(made: object) -> None:
    """Kill what a timed call made (a sandbox, or a fork's list of them)."""
    for box in made if isinstance(made, list) else [made]:
        if isinstance(box, AsyncSandbox):
            await box.kill()


async def main(rounds: int, mib: int) -> None:
    url, key = await LocalServer.address()
    os.environ |= {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": key}
    sbx = await AsyncSandbox.create()
    try:
        written = f"head -c {mib * 1024 * 1024} /dev/urandom > /home/user/data && sync"
        await sbx.commands.run(written, timeout=600)
        times: dict[str, list[float]] = {
            kind: [] for kind in ("snapshot", "create from snapshot", "fork", "fresh (baseline)")
        }
        for _ in range(rounds):
            took, snapshot = await _timed(sbx.create_snapshot)
            times["snapshot"].append(took)
            snapshot_id = snapshot.snapshot_id  # type: ignore[attr-defined]
            calls: dict[str, Callable[[], Awaitable[object]]] = {
                "create from snapshot": functools.partial(AsyncSandbox.create, snapshot_id),
                "fork": sbx.fork,
                "fresh (baseline)": AsyncSandbox.create,
            }
            for kind, call in calls.items():
                took, made = await _timed(call)
                times[kind].append(took)
                await _rid(made)
            await AsyncSandbox.delete_snapshot(snapshot_id)
        p50 = {kind: statistics.median(samples) for kind, samples in times.items()}
        for kind, took in p50.items():
            print(
                f"{kind}: p50 {took * 1000:.0f} ms ({took / p50['fresh (baseline)']:.2f}x a fresh sandbox)"
            )
        twice = p50["snapshot"] + p50["create from snapshot"]
        print(f"fork: {p50['fork'] / twice:.2f}x a snapshot and a sandbox made from it")
    finally:
        await sbx.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.mib))
