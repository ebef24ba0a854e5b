"""The cost of one activation under a policy against the same model step without one, in the
same run.

One scripted `swarm_react()` member makes n tool-call steps (zero model latency) and then
submits. The baseline arm runs it under `leaderless()`, step after step; the policy arm under
`round_robin()`, each step an activation of its own (the member waits at its boundary and the
policy activates it again, with both activation records). The cost of a step is the slope
between a short and a long run of each arm, so what an eval costs once cancels out.

    .venv/bin/python benchmarks/activation.py [--steps 20 120] [--repeat 5]

Reports the milliseconds per step of each arm and their ratio; the target is a ratio of at
most 1.2.
"""

import argparse
import tempfile
import time
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool

from inspect_swarm import leaderless, member, round_robin, swarm, swarm_react
from inspect_swarm.scripted import scripted_model


@tool
def noop() -> Tool:
    async def execute() -> str:
        """Do nothing."""
        return "ok"

    return execute


def run_once(policy: bool, steps: int) -> float:
    controller = round_robin(max_rounds=steps + 1) if policy else leaderless()
    task = Task(
        dataset=[Sample(input="x", target="42")],
        solver=swarm(
            member(swarm_react, {"tools": [noop()]}, name="solo"),
            controller=controller,
            channels=[],
        ),
        scorer=includes(),
    )
    script: dict[str, Any] = {
        "members": {"solo": [{"tool": "noop", "arguments": {}}] * steps + [{"submit": "42"}]}
    }
    model = scripted_model(script, usage={"input_tokens": 10, "output_tokens": 1})
    with tempfile.TemporaryDirectory() as log_dir:
        start = time.perf_counter()
        [log] = eval(task, model=model, log_dir=log_dir, display="none", log_samples=False)
        elapsed = time.perf_counter() - start
    assert log.status == "success", log.error
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs=2, default=[20, 120])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    short, long = args.steps
    run_once(True, short)  # warm up imports and caches
    runs: dict[tuple[bool, int], list[float]] = {
        (policy, n): [] for policy in (False, True) for n in (short, long)
    }
    for _ in range(args.repeat):
        # arms interleaved, so drift over the run favours none
        for key in runs:
            runs[key].append(run_once(*key))
    per_step = {
        policy: (min(runs[(policy, long)]) - min(runs[(policy, short)])) / (long - short)
        for policy in (False, True)
    }
    print(f"{'arm':>10} {'ms/step':>8}")
    print(f"{'no policy':>10} {per_step[False] * 1000:>8.3f}")
    print(f"{'policy':>10} {per_step[True] * 1000:>8.3f}")
    print(f"ratio policy/no policy: {per_step[True] / per_step[False]:.3f} (target <= 1.2)")


if __name__ == "__main__":
    main()
