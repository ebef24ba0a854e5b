"""Shared memory board throughput and swarm_wait wake-up latency, in process.

    .venv/bin/python benchmarks/board.py [--repeat 3]

Eight members (each its own task) append to and view a board of 100 files through the real
`shared_memory` tool and bus, with every evidence event logged to a transcript, as in a run:
half the operations are appends, half are views (one in 25 of them a listing of the whole
board). Every member writes every file, so each result's status line names about 100 files.
Reports writes/s and views/s (each kind's count over the time spent in it) and operations/s
(all operations over the wall time of the run), best of --repeat runs, and the share of
that run spent in Python's garbage collector, which walks the transcript's growing events.
Then one member's wait is woken by another's write, many times.
Targets (issue 4): at least 20,000 operations/s, wake-up under 5 ms. Never run as a test.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
from inspect_ai.log._transcript import Transcript, init_transcript
from inspect_ai.tool import Tool
from inspect_ai.util._span import _current_agent_span_id

from inspect_swarm import Channel, shared_memory
from inspect_swarm._context import _member, _swarm
from inspect_swarm._contracts._roster import Delivery, MemberInfo, MemberState
from inspect_swarm._runtime._bus._bus import SwarmBus
from inspect_swarm._runtime._member_run import MemberComm

MEMBERS = [f"m-{i}" for i in range(1, 9)]
FILES = 100
OPS_PER_MEMBER = 4_000


class Host:
    """The parts of a swarm run the bus reads."""

    def __init__(self, channels: Sequence[Channel] | None = None) -> None:
        self._roster = [MemberInfo(n) for n in MEMBERS]
        self._t0 = time.perf_counter()
        if channels is None:
            channels = [shared_memory(rate=None, max_board_bytes=16_777_216)]
        comms = {m.name: MemberComm() for m in self._roster}
        self.bus = SwarmBus(self, channels, comms)  # type: ignore[arg-type]

    @property
    def roster(self) -> Sequence[MemberInfo]:
        return self._roster

    stopping = False
    meter = None

    def clock(self) -> float:
        return time.perf_counter() - self._t0

    def member_state(self, name: str) -> MemberState:
        return "running"

    def member_status(self, name: str) -> str | None:
        return None

    def agent_returned(self, name: str) -> bool:
        return False

    def delivery(self, name: str) -> Delivery:
        return "notify"

    def background_running(self, name: str) -> int:
        return 0

    def member_span_id(self, name: str) -> str | None:
        return f"loop-{name}"


def tools(host: Host, name: str) -> dict[str, Tool]:
    from inspect_ai._util.registry import registry_info

    _member.set(name)
    _current_agent_span_id.set(f"loop-{name}")
    return {registry_info(t).name: t for t in host.bus.channel_tools(name)}


@dataclass
class Throughput:
    writes: int = 0
    views: int = 0
    write_seconds: float = 0.0
    view_seconds: float = 0.0
    elapsed: float = 0.0
    gc_seconds: float = 0.0

    @property
    def ops(self) -> float:
        return (self.writes + self.views) / self.elapsed


class GcTimer:
    """Seconds spent in the garbage collector while active."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


async def throughput() -> Throughput:
    init_transcript(Transcript())
    host = Host()
    _swarm.set(host)  # type: ignore[arg-type]
    result = Throughput()
    seed = tools(host, MEMBERS[0])["shared_memory"]
    for j in range(FILES):
        await seed(command="create", path=f"/shared_memory/d{j % 10}/f{j}", file_text="start")

    async def work(index: int, name: str) -> None:
        board = tools(host, name)["shared_memory"]
        clock = time.perf_counter
        for i in range(OPS_PER_MEMBER):
            j = (i + index * 13) % FILES
            path = f"/shared_memory/d{j % 10}/f{j}"
            if i % 2:
                start = clock()
                await board(command="append", path=path, append_text=f"{name} {i}")
                result.write_seconds += clock() - start
                result.writes += 1
            else:
                start = clock()
                await board(command="view", path=path if i % 50 else "/shared_memory")
                result.view_seconds += clock() - start
                result.views += 1
            # the tool never awaits: let the other members in, as a real run would
            if i % 64 == 0:
                await anyio.lowlevel.checkpoint()

    result.elapsed, result.gc_seconds = await run_members(host, work)
    return result


async def run_members(
    host: Host, work: Callable[[int, str], Coroutine[Any, Any, None]]
) -> tuple[float, float]:
    """Run `work(index, name)` for every member at once, then end the run; the run's seconds
    and the garbage collector's seconds in it."""
    gc.collect()
    timer = GcTimer()
    gc.callbacks.append(timer)
    start = time.perf_counter()
    try:
        async with anyio.create_task_group() as tg:
            for index, name in enumerate(MEMBERS):
                tg.start_soon(work, index, name)
        elapsed = time.perf_counter() - start
    finally:
        gc.callbacks.remove(timer)
        host.bus.close()
    return elapsed, timer.seconds


async def wake_latency(rounds: int = 300) -> list[float]:
    host = Host()
    return await wake_latencies(
        host,
        lambda t, i: t["swarm_wait"](path="/shared_memory/signal"),
        lambda t, i: t["shared_memory"](command="view", path="/shared_memory/signal"),
        lambda t, i: t["shared_memory"](
            command="append", path="/shared_memory/signal", append_text=str(i)
        ),
        rounds,
    )


Step = Callable[[dict[str, Tool], int], Awaitable[object]]
"""A member's call in round `i`, given its tools."""


async def wake_latencies(
    host: Host, wait: Step, ack: Step, signal: Step, rounds: int = 300
) -> list[float]:
    """The seconds from m-2's `signal` to the end of m-1's `wait`, which m-1 then `ack`s, in
    each round."""
    _swarm.set(host)  # type: ignore[arg-type]
    latencies: list[float] = []

    async def waiter(i: int, done: anyio.Event, woke: list[float]) -> None:
        own = tools(host, "m-1")
        await wait(own, i)
        woke.append(time.perf_counter())
        await ack(own, i)
        done.set()

    for i in range(rounds):
        done, woke = anyio.Event(), list[float]()
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, i, done, woke)
            while not host.bus._pending:
                await anyio.lowlevel.checkpoint()
            writer = tools(host, "m-2")
            sent = time.perf_counter()
            await signal(writer, i)
            await done.wait()
        latencies.append(woke[0] - sent)
    host.bus.close()
    return latencies


async def main(repeat: int) -> None:
    runs = [await throughput() for _ in range(repeat)]
    best = max(runs, key=lambda r: r.ops)
    print(f"board, {FILES} files, {len(MEMBERS)} concurrent members (best of {repeat}):")
    print(
        f"  writes/s {best.writes / best.write_seconds:,.0f}   "
        f"views/s {best.views / best.view_seconds:,.0f}   operations/s {best.ops:,.0f}   "
        f"(garbage collector {best.gc_seconds / best.elapsed:.0%} of the time)"
    )
    init_transcript(Transcript())
    print(f"swarm_wait wake-up: {wake_figures(await wake_latency())}")


def wake_figures(latencies: list[float]) -> str:
    ms = sorted(x * 1000 for x in latencies)
    return (
        f"median {statistics.median(ms):.3f} ms, p95 {ms[int(len(ms) * 0.95)]:.3f} ms, "
        f"max {ms[-1]:.3f} ms"
    )


def benchmark(main: Callable[[int], Awaitable[None]], doc: str) -> None:
    """Run `main(repeat)` on asyncio, then on trio, with --repeat from the command line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs (best kept)")
    args = parser.parse_args()
    for backend in ("asyncio", "trio"):
        print(f"[{backend}]")
        anyio.run(main, args.repeat, backend=backend)


if __name__ == "__main__":
    benchmark(main, __doc__ or "")
