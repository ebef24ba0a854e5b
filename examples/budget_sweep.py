"""Sweep agent count, budget and split as task parameters (docs: Budgets > Sweeps).

    inspect eval examples/budget_sweep.py -T k=8 -T budget=8 -T split=equal

Offline, on the scripted model (`python examples/budget_sweep.py`), it runs a small sweep into
`logs/budget_sweep`; `python examples/analyze_sweep.py` then prints score and realized cost per arm.
"""

import sys
from pathlib import Path
from typing import Literal

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.scorer import match

sys.path.insert(0, str(Path(__file__).parent))

from questions import QUESTIONS

from inspect_swarm import Budget, member, swarm, swarm_resources


@task
def budget_sweep(k: int = 4, budget: float = 1.0, split: Literal["pool", "equal"] = "pool") -> Task:
    return Task(
        dataset=QUESTIONS,
        solver=swarm(
            members=member(react, args={"tools": [swarm_resources()]}, count=k),
            channels=[],
            budget=Budget(split=split),
        ),
        scorer=match(),
        cost_limit=budget,
    )


# Offline: each member thinks 30 times, then answers. A call costs $0.001, so a budget of $0.1 (a
# cap of $0.095, with $0.005 held back for calls in flight) pays for one member's 31 calls, not
# for four members in a pool; with budget = k * b and split="equal", each member's share is
# b * 0.95, as for a single agent with budget b.
SCRIPT = {
    "usage": {"input_tokens": 100, "output_tokens": 10},
    "price": {"input": 5.0, "output": 50.0},
    "samples": {
        sample_id: {"*": [*[{"text": "Thinking."}] * 30, {"submit": answer}]}
        for sample_id, answer in (("product", "42"), ("sum", "42"), ("power", "1024"))
    },
}
ARMS = [
    {"k": 1, "budget": 0.1, "split": "pool"},
    {"k": 4, "budget": 0.1, "split": "pool"},
    {"k": 4, "budget": 0.4, "split": "equal"},
]

if __name__ == "__main__":
    from inspect_ai import eval

    from inspect_swarm.scripted import scripted_model

    log_dir = Path(__file__).parent.parent / "logs" / "budget_sweep"
    for arm in ARMS:
        [log] = eval(
            budget_sweep(**arm),  # type: ignore[arg-type]
            model=scripted_model(SCRIPT, name="sweep"),
            log_dir=str(log_dir),
            display="none",
        )
        print(f"{arm}: {log.status}")
    print(f"Logs in {log_dir}. Analyse them with: python examples/analyze_sweep.py {log_dir}")
