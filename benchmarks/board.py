"""Shared memory board throughput and swarm_wait wake-up latency, in process.

    .venv/bin/python benchmarks/board.py

Eight members (each its own task) write to and view a board of 100 files through the real
`shared_memory` tool and bus, then one member's wait is woken by another's write, many times.
Targets (issue 4): at least 20,000 operations/s, wake-up under 5 ms. Never run as a test.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import anyio
import anyio.lowlevel
from inspect_ai.log._transcript import Transcript, init_transcript
from inspect_ai.tool import Tool
from inspect_ai.util._span import _current_agent_span_id

from inspect_swarm import shared_memory
from inspect_swarm._bus._bus import Bus
from inspect_swarm._context import _member, _swarm
from inspect_swarm._roster import Delivery, MemberInfo, MemberState

MEMBERS = [f"m-{i}" for i in range(1, 9)]
FILES = 100
OPS_PER_MEMBER = 4_000


class Host:
    """The parts of a swarm run the bus reads."""

    def __init__(self) -> None:
        self._roster = [MemberInfo(n) for n in MEMBERS]
        self._t0 = time.perf_counter()
        self.bus = Bus(self, [shared_memory(rate=None, max_board_bytes=16_777_216)])  # type: ignore[arg-type]

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


async def throughput() -> tuple[float, float]:
    host = Host()
    _swarm.set(host)  # type: ignore[arg-type]
    writes = views = 0
    seed = tools(host, MEMBERS[0])["shared_memory"]
    for j in range(FILES):
        await seed(command="create", path=f"/shared_memory/d{j % 10}/f{j}", file_text="start")

    async def work(index: int, name: str) -> None:
        nonlocal writes, views
        board = tools(host, name)["shared_memory"]
        for i in range(OPS_PER_MEMBER):
            j = (i + index * 13) % FILES
            path = f"/shared_memory/d{j % 10}/f{j}"
            if i % 2:
                await board(command="append", path=path, append_text=f"{name} {i}")
                writes += 1
            else:
                await board(command="view", path=path if i % 50 else "/shared_memory")
                views += 1
            if i % 64 == 0:
                await anyio.lowlevel.checkpoint()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index, name in enumerate(MEMBERS):
            tg.start_soon(work, index, name)
    elapsed = time.perf_counter() - start
    return writes / elapsed, views / elapsed


async def wake_latency(rounds: int = 300) -> list[float]:
    host = Host()
    _swarm.set(host)  # type: ignore[arg-type]
    latencies: list[float] = []

    async def waiter(done: anyio.Event, woke: list[float]) -> None:
        wait = tools(host, "m-1")["swarm_wait"]
        board = tools(host, "m-1")["shared_memory"]
        await wait(path="/shared_memory/signal")
        woke.append(time.perf_counter())
        await board(command="view", path="/shared_memory/signal")
        done.set()

    for i in range(rounds):
        done, woke = anyio.Event(), []
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, done, woke)
            while not host.bus._pending:
                await anyio.lowlevel.checkpoint()
            writer = tools(host, "m-2")["shared_memory"]
            sent = time.perf_counter()
            await writer(command="append", path="/shared_memory/signal", append_text=str(i))
            await done.wait()
        latencies.append(woke[0] - sent)
    return latencies


async def main() -> None:
    init_transcript(Transcript())
    writes, views = await throughput()
    print(f"board, {FILES} files, {len(MEMBERS)} concurrent members:")
    print(f"  writes/s {writes:,.0f}   views/s {views:,.0f}   operations/s {writes + views:,.0f}")
    latencies = await wake_latency()
    ms = sorted(x * 1000 for x in latencies)
    print(
        f"swarm_wait wake-up: median {statistics.median(ms):.3f} ms, "
        f"p95 {ms[int(len(ms) * 0.95)]:.3f} ms, max {ms[-1]:.3f} ms"
    )


if __name__ == "__main__":
    for backend in ("asyncio", "trio"):
        print(f"[{backend}]")
        anyio.run(main, backend=backend)
