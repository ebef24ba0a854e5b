"""Pause and resume through the e2b SDK, against a timeout change in the same run.

    .venv/bin/python benchmarks/e2b_pause_bench.py [--rounds 20] [--mib 100]

Starts a local swarm server and one E2B sandbox running a process that holds `--mib` MiB
of memory it wrote, then measures, alternating so all see the same load: (1) `pause()`;
(2) `connect()`, which resumes the paused sandbox; (3) `set_timeout()`, a control-plane
call that freezes nothing (the baseline: what any call costs). A pause freezes the
sandbox's cgroup in place, so neither depends on the memory held. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

from e2b import AsyncSandbox

from inspect_swarm.sandbox._local_server import LocalServer

_HOLD = "import time; b = bytearray(b'x' * {size}); time.sleep(3600)"


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    await call()
    return time.perf_counter() - began


async def main(rounds: int, mib: int) -> None:
    url, key = await LocalServer.address()
    os.environ |= {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": key}
    sbx = await AsyncSandbox.create()
    try:
        await sbx.files.write("/tmp/hold.py", _HOLD.format(size=mib * 1024 * 1024))
        await sbx.commands.run("python3 /tmp/hold.py", background=True)
        await asyncio.sleep(1)  # its memory is written
        kinds: dict[str, Callable[[], Awaitable[object]]] = {
            "pause": sbx.pause,
            "resume (connect)": lambda: AsyncSandbox.connect(sbx.sandbox_id, timeout=300),
            "set_timeout (baseline)": lambda: sbx.set_timeout(300),
        }
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(rounds):
            for kind, call in kinds.items():
                times[kind].append(await _timed(call))
        base = statistics.median(times["set_timeout (baseline)"])
        for kind, samples in times.items():
            p50 = statistics.median(samples)
            print(f"{kind}: p50 {p50 * 1000:.2f} ms ({p50 / base:.2f}x the baseline)")
    finally:
        await sbx.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--mib", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.mib))
