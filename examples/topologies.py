"""Compare the swarm's topologies on one dataset and budget: one task, a `topology` parameter.

    inspect eval examples/topologies.py -T topology=vote --model scripted/demo \
        -M script=examples/topologies.yaml

Each arm runs the same number of `swarm_react()` members, on the same questions and the same
token budget. The first six share the shared-memory board and differ only in the controller:

- `leaderless`: stop at the first submission.
- `verified`: stop at the first submission that passes the task's scorer.
- `quiescence`: stop when every member left waits with nothing to do; answer with the latest.
- `rounds`: two synchronous rounds, each member seeing every answer of the round before.
- `vote`: every member answers; the majority wins.
- `composed`: a composed stop, the first verified pass or 20 model calls without progress.

The last two organise the work through the channels that hand it out:

- `coordinator`: a lead assigns tasks and sends messages to the workers, who start once they
  have work; the lead's answer ends the swarm (`messages()` and `tasks()`).
- `task_list`: peers share out the work on a task list, and the swarm stops once every task is
  done and every member waits (`tasks()`, `quiescence()`); answer with the latest.

Members are named after their part in the arm (`solver-*`, `lead` and `worker-*`, `peer-*`), so
one script drives every arm.

Offline, on the scripted model, `python examples/topologies.py` runs every arm into
`logs/topologies` and prints each arm's score and stop reasons.
"""

import sys
from pathlib import Path
from typing import Literal

from inspect_ai import Task, task
from inspect_ai.scorer import match

sys.path.insert(0, str(Path(__file__).parent))

from questions import QUESTIONS

from inspect_swarm import (
    Budget,
    Channel,
    Controller,
    Member,
    coordinator,
    leaderless,
    member,
    messages,
    quiescence,
    rounds,
    shared_memory,
    stall,
    swarm,
    swarm_react,
    tasks,
    verified,
    verified_pass,
    vote,
)

Topology = Literal[
    "leaderless", "verified", "quiescence", "rounds", "vote", "composed", "coordinator", "task_list"
]
TOPOLOGIES: tuple[Topology, ...] = (
    "leaderless",
    "verified",
    "quiescence",
    "rounds",
    "vote",
    "composed",
    "coordinator",
    "task_list",
)


def controller(topology: Topology) -> Controller:
    """The controller of one arm."""
    match topology:
        case "leaderless":
            return leaderless()
        case "verified":
            return verified()
        case "quiescence":
            return quiescence(settle=0.5, final="last")
        case "rounds":
            return rounds(2)
        case "vote":
            return vote()
        case "composed":
            return leaderless(stop=verified_pass() | stall(20))
        case "coordinator":
            return coordinator("lead")
        case "task_list":
            return quiescence(settle=0.5, final="last")
    raise ValueError(
        f"topologies(topology=...): {topology!r} is not a topology. Use one of {TOPOLOGIES}."
    )


def team(topology: Topology, k: int) -> tuple[list[Member], list[Channel]]:
    """The members and channels of one arm: `k` members in every arm."""
    match topology:
        case "coordinator":
            lead = member(swarm_react, name="lead")
            return [lead, member(swarm_react, name="worker", count=k - 1)], [messages(), tasks()]
        case "task_list":
            return [member(swarm_react, name="peer", count=k)], [tasks()]
    return [member(swarm_react, name="solver", count=k)], [shared_memory()]


@task
def topologies(topology: Topology = "leaderless", k: int = 3, tokens: int = 100_000) -> Task:
    members, channels = team(topology, k)
    return Task(
        dataset=QUESTIONS,
        solver=swarm(
            members=members,
            controller=controller(topology),
            channels=channels,
            budget=Budget(tokens=tokens),
        ),
        scorer=match(),
    )


if __name__ == "__main__":
    from inspect_ai import eval

    from inspect_swarm.scripted import scripted_model

    log_dir = Path(__file__).parent.parent / "logs" / "topologies"
    script = Path(__file__).parent / "topologies.yaml"
    for topology in TOPOLOGIES:
        [log] = eval(
            topologies(topology),
            model=scripted_model(script, name="demo"),
            log_dir=str(log_dir),
            display="none",
        )
        samples = log.samples or []
        correct = sum(s.scores is not None and s.scores["match"].value == "C" for s in samples)
        reasons = sorted({str(s.store["inspect_swarm:ledger"]["stop_reason"]) for s in samples})
        print(f"{topology:>10}: {correct}/{len(samples)} correct, stopped by {', '.join(reasons)}")
    print(f"Logs in {log_dir}.")
