"""Members split a count, share their parts on the shared memory board, and wait for each other.

Each member counts the primes in its share of the range, appends its part to
/shared_memory/parts.md, and waits with `swarm_wait` until the other part is there. The members
are `swarm_react()` members: `react()` with the board's tools and notices, which from the
command line is `-S 'members={factory: swarm_react, name: w, count: 2}' -S channels=shared_memory`.
Offline, on the scripted model:

    inspect eval examples/shared_memory.py --model scripted/demo \
        -M script=examples/shared_memory.yaml
"""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes

from inspect_swarm import member, shared_memory, swarm, swarm_react

PROMPT = (
    "How many primes are there below 100? Split the count between the members: each counts "
    "its own share of the range (w-1 the first, w-2 the next, and so on), appends its part to "
    "/shared_memory/parts.md, waits for the other parts, and submits the total."
)


@task
def shared_memory_count(k: int = 2) -> Task:
    return Task(
        dataset=[Sample(input=PROMPT, target="25")],
        solver=swarm(
            # react() with the board's tools and notices
            members=member(
                swarm_react,
                {"prompt": "Work with the other members through shared memory."},
                name="w",
                count=k,
            ),
            channels=[shared_memory()],
        ),
        scorer=includes(),
    )
