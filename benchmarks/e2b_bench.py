"""Per-member sandbox start and exec round trip on the swarm server, through swarm_server.

    .venv/bin/python benchmarks/e2b_bench.py [--rounds 20]

Starts a local swarm server, then measures (1) `sample_init` of a 3-member sample (three
sandboxes created concurrently) and its cleanup, and (2) `exec(["true"])` round trips on one
sandbox. Targets: start p50 < 0.5 s, exec p50 < 20 ms. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import statistics
import time

import anyio

from inspect_swarm.sandbox import SwarmServerConfig, SwarmServerSandboxEnvironment
from inspect_swarm.sandbox._local_server import LocalServer

MEMBERS = ("agent-1", "agent-2", "agent-3")


def _percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


async def main(rounds: int) -> None:
    url, key = await LocalServer.address()
    config = SwarmServerConfig(services=MEMBERS, api_url=url, api_key=key)
    provider = SwarmServerSandboxEnvironment
    starts = []
    for _ in range(rounds):
        began = time.perf_counter()
        envs = await provider.sample_init("bench", config, {})
        starts.append(time.perf_counter() - began)
        await provider.sample_cleanup("bench", config, envs, False)
    print(f"3-member sample start (3 sandboxes concurrently): {_percentiles(starts)}")

    envs = await provider.sample_init("bench", config, {})
    env = envs[MEMBERS[0]]
    trips = []
    for _ in range(rounds * 5):
        began = time.perf_counter()
        await env.exec(["true"])
        trips.append(time.perf_counter() - began)
    await provider.sample_cleanup("bench", config, envs, False)
    print(f"exec round trip (true): {_percentiles(trips)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    anyio.run(main, parser.parse_args().rounds)
