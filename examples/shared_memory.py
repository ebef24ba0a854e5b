"""Members split a count, share their parts on the shared memory board, and wait for each other.

Each member counts the primes in its half of the range, appends its part to
/shared_memory/parts.md, and waits with `swarm_wait` until the other part is there. Offline, on
the scripted model:

    inspect eval examples/shared_memory.py --model scripted/demo \
        -M script=examples/shared_memory.yaml
"""

from inspect_ai import Task, task
from inspect_ai.agent import Agent, agent, react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes

from inspect_swarm import member, shared_memory, swarm, swarm_on_continue, swarm_tools

PROMPT = (
    "How many primes are there below 100? Split the count: {member} counts its half of the "
    "range, appends its part to /shared_memory/parts.md, waits for the other part, and "
    "submits the total."
)


@agent
def counter() -> Agent:
    """A react member with the board's tools and notices."""
    return react(
        prompt="Work with the other members through shared memory.",
        tools=[swarm_tools()],
        on_continue=swarm_on_continue(),
    )


@task
def shared_memory_count(k: int = 2) -> Task:
    return Task(
        dataset=[Sample(input=PROMPT, target="25")],
        solver=swarm(members=member(counter, name="w", count=k), channels=[shared_memory()]),
        scorer=includes(),
    )
