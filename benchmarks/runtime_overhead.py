"""Runtime overhead of the swarm against bare react agents, measured in the same run.

k scripted members each make 20 tool-call turns (zero model latency) and then submit. The
baseline runs k bare `react()` agents under a plain anyio task group in a solver; the swarm
arm runs the same agents as `swarm()` members, with all its records. A third arm adds a token
cap split equally between members, to measure the cost of metering against caps.

    .venv/bin/python benchmarks/runtime_overhead.py [--k 1 8 64 256] [--repeat 3]

Reports wall time (best of --repeat) and peak traced memory per arm, and the ratios the
project targets: swarm/bare <= 1.05 at k=64 and k=256, extra peak memory <= 100 KB per
member, and capped/uncapped <= 1.03.
"""

import argparse
import gc
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import anyio
from inspect_ai import Task, eval
from inspect_ai.agent import AgentState, react
from inspect_ai.dataset import Sample
from inspect_ai.model import Model
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import Tool, tool

from inspect_swarm import Budget, member, swarm
from inspect_swarm._context import _member
from inspect_swarm.scripted import scripted_model

TURNS = 20


@tool
def noop() -> Tool:
    async def execute() -> str:
        """Do nothing."""
        return "ok"

    return execute


def script() -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"tool": "noop", "arguments": {}}] * TURNS
    return {"members": {"*": [*steps, {"submit": "42"}]}}


@solver
def bare(k: int) -> Solver:
    """k react agents under a plain anyio task group: the baseline."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        async def one(i: int) -> None:
            # the scripted model routes by member name, as it does inside the swarm
            token = _member.set(f"react-{i + 1}")
            try:
                await react(tools=[noop()])(AgentState(messages=list(state.messages)))
            finally:
                _member.reset(token)

        async with anyio.create_task_group() as tg:
            for i in range(k):
                tg.start_soon(one, i)
        return state

    return solve


def arm(name: str, k: int) -> Any:
    if name == "bare":
        return bare(k)
    budget = Budget(tokens=10**9, split="equal") if name == "capped" else Budget()
    return swarm(
        member(react, {"tools": [noop()]}, count=k),
        channels=[],
        budget=budget,
    )


def run_once(name: str, k: int, model: Callable[[], Model]) -> float:
    task = Task(dataset=[Sample(input="x", target="42")], solver=arm(name, k), scorer=includes())
    with tempfile.TemporaryDirectory() as log_dir:
        start = time.perf_counter()
        [log] = eval(task, model=model(), log_dir=log_dir, display="none", log_samples=False)
        elapsed = time.perf_counter() - start
    assert log.status == "success", log.error
    return elapsed


def peak_memory(name: str, k: int, model: Callable[[], Model]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        run_once(name, k, model)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    def model() -> Model:
        return scripted_model(script(), usage={"input_tokens": 10, "output_tokens": 1})

    run_once("bare", 1, model)  # warm up imports and caches
    print(
        f"{'k':>4} {'bare s':>8} {'swarm s':>8} {'ratio':>6} {'capped s':>9} {'cap/swarm':>9}"
        f" {'extra KB/member':>15}"
    )
    arms = ("bare", "swarm", "capped")
    for k in args.k:
        # arms interleaved, so drift over the run (caches, the allocator) favours none
        runs: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.repeat):
            for name in arms:
                runs[name].append(run_once(name, k, model))
        times = {name: min(seconds) for name, seconds in runs.items()}
        extra = (peak_memory("swarm", k, model) - peak_memory("bare", k, model)) / k / 1024
        print(
            f"{k:>4} {times['bare']:>8.3f} {times['swarm']:>8.3f}"
            f" {times['swarm'] / times['bare']:>6.3f} {times['capped']:>9.3f}"
            f" {times['capped'] / times['swarm']:>9.3f} {extra:>15.1f}"
        )


if __name__ == "__main__":
    main()
