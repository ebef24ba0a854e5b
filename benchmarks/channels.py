"""Messages, task list and notes throughput, and swarm_wait wake-up latency, in process.

    .venv/bin/python benchmarks/channels.py [--repeat 3]

For each channel, eight members (each its own task) use its real tool through the real bus,
with every evidence event logged to a transcript, as in a run (the board's benchmark,
`benchmarks/board.py`, does the same for shared memory):

- messages: half the operations send a message to another member (one in 25 to all), half
  read the member's unread messages (one in 25 of them a listing of its inbox);
- tasks: each member in turn creates a task, claims it, marks it done with its version and
  views one (one in 100 a listing of the claimed tasks), on a list that grows to 8,000 tasks;
- notes: half the operations add a note, half read the notes the loop has not read (one in
  200 a search of the whole log, which grows to 16,000 notes).

Reports operations/s (every operation over the run's wall time), best of --repeat runs,
and the share of that run spent in Python's garbage collector. Then one member's wait is
woken by another member's record, many times, for each channel. The shared-memory board is
measured first, in the same run, and each channel's operations/s is also given as a multiple
of the board's, so the comparison holds on a machine whose speed varies.
Targets (issue 18): at least 20,000 operations/s per channel, wake-up under 5 ms. Never run
as a test.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.lowlevel
from board import (
    MEMBERS,
    OPS_PER_MEMBER,
    Host,
    benchmark,
    run_members,
    tools,
    wake_figures,
    wake_latencies,
)
from board import throughput as board_throughput
from board import wake_latency as board_wake_latency
from inspect_ai.log._transcript import Transcript, init_transcript
from inspect_ai.tool import Tool

from inspect_swarm import Channel, messages, notes, tasks
from inspect_swarm._context import _swarm

Tools = dict[str, Tool]
Operation = Callable[[int, int, str, Tools], Awaitable[object]]
"""One operation of a member: its number, the member's index and name, and its tools."""


async def message_op(i: int, index: int, name: str, t: Tools) -> object:
    if i % 2:
        other = MEMBERS[(index + 1 + (i // 2) % (len(MEMBERS) - 1)) % len(MEMBERS)]
        return await t["messages"](command="send", to="all" if i % 50 == 1 else other, text=f"{i}")
    return await t["messages"](command="list" if i % 50 == 0 else "read")


_mine: dict[str, str] = {}


async def task_op(i: int, index: int, name: str, t: Tools) -> object:
    tool = t["tasks"]
    match i % 4:
        case 0:
            made = str(await tool(command="create", title=f"{name} {i}"))
            _mine[name] = made.split()[1]
            return made
        case 1:
            return await tool(command="claim", task=_mine[name])
        case 2:
            return await tool(command="update", task=_mine[name], version=2, status="done")
    if i % 100 == 3:
        return await tool(command="list", status="claimed")
    return await tool(command="view", task=_mine[name])


async def note_op(i: int, index: int, name: str, t: Tools) -> object:
    if i % 2:
        return await t["notes"](command="add", kind="fact", text=f"{name} found {i}")
    if i % 200 == 0:
        return await t["notes"](command="search", query=f"found {i - 1}")
    return await t["notes"](command="read")


@dataclass
class Workload:
    name: str
    channel: Callable[[], Channel]
    op: Operation
    # a record from `signal`'s member that wakes the waiter, and the waiter's look at it
    signal: Callable[[Tools, int], Awaitable[object]]
    ack: Callable[[Tools, int], Awaitable[object]]


WORKLOADS = [
    Workload(
        "messages",
        lambda: messages(rate=None, max_messages=100_000),
        message_op,
        lambda t, i: t["messages"](command="send", to="m-1", text=str(i)),
        lambda t, i: t["messages"](command="read"),
    ),
    Workload(
        "tasks",
        lambda: tasks(rate=None, max_tasks=10_000),
        task_op,
        lambda t, i: t["tasks"](command="create", title=str(i)),
        lambda t, i: t["tasks"](command="view", task=f"t-{i + 1}"),
    ),
    Workload(
        "notes",
        lambda: notes(rate=None, max_notes=100_000),
        note_op,
        lambda t, i: t["notes"](command="add", kind="fact", text=str(i)),
        lambda t, i: t["notes"](command="read"),
    ),
]


@dataclass
class Throughput:
    ops: int = 0
    elapsed: float = 0.0
    gc_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.ops / self.elapsed


async def throughput(workload: Workload) -> Throughput:
    init_transcript(Transcript())
    host = Host([workload.channel()])
    _swarm.set(host)  # type: ignore[arg-type]
    result = Throughput()

    async def work(index: int, name: str) -> None:
        own = tools(host, name)
        for i in range(OPS_PER_MEMBER):
            await workload.op(i, index, name, own)
            result.ops += 1
            # the tools never await: let the other members in, as a real run would
            if i % 64 == 0:
                await anyio.lowlevel.checkpoint()

    result.elapsed, result.gc_seconds = await run_members(host, work)
    return result


async def wake_latency(workload: Workload) -> list[float]:
    init_transcript(Transcript())
    host = Host([workload.channel()])
    return await wake_latencies(host, lambda t, i: t["swarm_wait"](), workload.ack, workload.signal)


async def main(repeat: int) -> None:
    board = max([await board_throughput() for _ in range(repeat)], key=lambda r: r.ops)
    init_transcript(Transcript())
    print(
        f"{'board':>8}: operations/s {board.ops:,.0f} (best of {repeat}, garbage collector "
        f"{board.gc_seconds / board.elapsed:.0%} of the time); swarm_wait wake-up "
        f"{wake_figures(await board_wake_latency())}"
    )
    for workload in WORKLOADS:
        runs = [await throughput(workload) for _ in range(repeat)]
        best = max(runs, key=lambda r: r.rate)
        wake = wake_figures(await wake_latency(workload))
        print(
            f"{workload.name:>8}: operations/s {best.rate:,.0f} ({best.rate / board.ops:.2f}x "
            f"the board; best of {repeat}, {best.ops:,} operations, garbage collector "
            f"{best.gc_seconds / best.elapsed:.0%} of the time); swarm_wait wake-up {wake}"
        )


if __name__ == "__main__":
    benchmark(main, __doc__ or "")
