"""Logs of two arms of a small swarm on the scripted model, with known stories, for the readers,
the dataframes, `inspect-swarm show` and the plots.

In sample `count`, w-1 and w-2 split a count through the shared-memory board: w-1 writes its
part and waits for w-2's, reads the board and submits 25 first; w-2 reads the board too, and
is stopped. w-3, when there is one, is still in a long call: the swarm cancels it after the
grace period. In sample `product`, the others think until each reaches its token share, and
then w-1 answers 42.
"""

from pathlib import Path
from typing import Any

from inspect_ai import Epochs, Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog
from inspect_ai.scorer import includes

from inspect_swarm import Budget, member, member_scores, shared_memory, swarm, swarm_react
from inspect_swarm.scripted import scripted_model

PARTS = "/shared_memory/parts.md"
GRACE = 1.0
"""Long enough for w-2's last call (held until the stop) to end within it on a loaded machine,
so only w-3's call is cut (a call cut is unknown, and makes the arm's cost a lower bound)."""
SCRIPT: dict[str, Any] = {
    "samples": {
        "count": {
            "w-1": [
                {"tool": "shared_memory", "arguments": {"command": "append", "path": PARTS,
                                                         "append_text": "w-1: 15"},
                 "delay": 0.5},
                {"tool": "swarm_wait", "arguments": {"path": PARTS}},
                {"tool": "shared_memory", "arguments": {"command": "view", "path": PARTS}},
                {"submit": "25"},
            ],
            "w-2": [
                {"text": "Counting.", "delay": 0.8},
                {"tool": "shared_memory", "arguments": {"command": "append", "path": PARTS,
                                                         "append_text": "w-2: 10"}},
                # in flight when w-1's answer stops the swarm, so w-2's submit is refused
                {"tool": "shared_memory", "arguments": {"command": "view", "path": PARTS},
                 "after": "stop"},
                {"submit": "25"},
            ],
            "w-3": [{"text": "Still thinking.", "delay": 30}],
        },
        "product": {
            "w-1": [{"submit": "42", "delay": 0.5}],
            "*": ["Thinking."] * 10,
        },
    },
}  # fmt: skip


@task
def arm(k: int = 2) -> Task:
    return Task(
        dataset=[
            Sample(input="How many primes below 100?", target="25", id="count"),
            Sample(input="What is 6 times 7?", target="42", id="product"),
        ],
        solver=swarm(
            member(swarm_react, name="w", count=k),
            channels=[shared_memory()],
            # each member's share is 750 tokens at k=2 and 500 at k=3: w-1 and w-2 count with 440
            budget=Budget(tokens=1500, split="equal", grace=GRACE),
        ),
        scorer=[includes(), member_scores(includes())],
        epochs=Epochs(2),
    )


def build(log_dir: Path, log_format: str = "eval") -> list[EvalLog]:
    """Run the arms k=2 and k=3 into `log_dir`."""
    logs = eval(
        [arm(k=2), arm(k=3)],
        model=scripted_model(SCRIPT, name="arms"),
        log_dir=str(log_dir),
        log_format=log_format,  # type: ignore[arg-type]
        display="none",
    )
    assert all(log.status == "success" for log in logs), [log.error for log in logs]
    return logs
