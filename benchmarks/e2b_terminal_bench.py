"""A terminal's keystroke round trip through the e2b SDK, against a command's stdin round trip.

    .venv/bin/python benchmarks/e2b_terminal_bench.py [--rounds 200]

Starts a local swarm server and one E2B sandbox, then measures, alternating so both see the
same load: (1) a key typed into a terminal (`sandbox.pty`, bash at its prompt) until its echo
comes back; (2) a line written to `cat`'s stdin (`commands.send_stdin`) until `cat` prints
it. Both go through the same SDK call and the same relay; (1) adds the terminal's line
discipline. Target: the terminal at most 1.5x the pipe. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

from e2b import AsyncSandbox, PtySize

from inspect_swarm.sandbox._local_server import LocalServer


class Echo:
    """Output as it comes, and a wait for the next piece of it."""

    def __init__(self) -> None:
        self.seen = asyncio.Event()

    def add(self, _: bytes | str) -> None:
        self.seen.set()

    async def after(self, send: Awaitable[None]) -> float:
        self.seen.clear()
        began = time.perf_counter()
        await send
        await asyncio.wait_for(self.seen.wait(), 30)
        return time.perf_counter() - began


def _p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def main(rounds: int) -> None:
    url, key = await LocalServer.address()
    os.environ |= {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": key}
    sbx = await AsyncSandbox.create()
    try:
        term_echo, pipe_echo = Echo(), Echo()
        term = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=term_echo.add)
        cat = await sbx.commands.run("cat", background=True, stdin=True, on_stdout=pipe_echo.add)
        await asyncio.sleep(1)  # bash's prompt is out
        trips: dict[str, list[float]] = {"terminal": [], "pipe": []}
        kinds: dict[str, Callable[[], Awaitable[None]]] = {
            "terminal": lambda: sbx.pty.send_stdin(term.pid, b"x"),
            "pipe": lambda: sbx.commands.send_stdin(cat.pid, "x\n"),
        }
        echoes = {"terminal": term_echo, "pipe": pipe_echo}
        for _ in range(rounds):
            for kind, send in kinds.items():
                trips[kind].append(await echoes[kind].after(send()))
        terminal, pipe = _p50(trips["terminal"]), _p50(trips["pipe"])
        print(f"keystroke round trip, terminal: p50 {terminal:.2f} ms")
        print(f"line round trip, pipe (baseline): p50 {pipe:.2f} ms")
        print(f"terminal / pipe: {terminal / pipe:.2f}x (target at most 1.5x)")
    finally:
        await sbx.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200)
    asyncio.run(main(parser.parse_args().rounds))
