"""A command run through `sudo` by the sandbox's `user`, against the same command run as root.

    .venv/bin/python benchmarks/e2b_sudo_bench.py [--rounds 50]

Starts a local swarm server and one E2B sandbox, then times, alternating so both see the
same load: (1) `sudo id -u` as `user` (bash, then sudo's python, then PID 1's handler starts
`id` as root); (2) `id -u` with `user="root"` (bash, then `id`); (3) a python that prints 0
as `user`, sudo's interpreter alone. The difference between (1) and (2) is what sudo costs:
its interpreter's start, (3) less (2), and one request to PID 1. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from e2b import AsyncSandbox

from inspect_swarm.sandbox._local_server import LocalServer


async def main(rounds: int) -> None:
    url, key = await LocalServer.address()
    os.environ |= {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": key}
    sbx = await AsyncSandbox.create()
    try:
        runs = {
            "sudo": ("sudo id -u", "user"),
            "root": ("id -u", "root"),
            "python": ("python3 -IS -c 'print(0)'", "user"),
        }
        times: dict[str, list[float]] = {kind: [] for kind in runs}
        for _ in range(rounds):
            for kind, (command, user) in runs.items():
                began = time.perf_counter()
                result = await sbx.commands.run(command, user=user)
                times[kind].append(time.perf_counter() - began)
                assert result.stdout == "0\n", result
        p50 = {kind: statistics.median(samples) * 1000 for kind, samples in times.items()}
        for kind, (command, user) in runs.items():
            print(f"{kind}: `{command}` as {user}, p50 {p50[kind]:.1f} ms")
        added, python = p50["sudo"] - p50["root"], p50["python"] - p50["root"]
        ratio = p50["sudo"] / p50["root"]
        print(f"sudo / root: {ratio:.2f}x; sudo adds {added:.1f} ms, {python:.1f} its python's")
    finally:
        await sbx.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    asyncio.run(main(parser.parse_args().rounds))
