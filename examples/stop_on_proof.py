"""Stop the swarm on the first proof: the `until_proved` controller and `checked_solver`.

A member's normal return means a passed check only because `checked_solver()` makes it so:
it raises a member-local custom limit when its agent returns without a submission that passed
the task's scorer. Offline, on the scripted model:

    inspect eval examples/stop_on_proof.py --model scripted/demo \
        -M script=examples/stop_on_proof.yaml
"""

from contextlib import aclosing

from inspect_ai import Task, task
from inspect_ai.agent import Agent, AgentAttempts, AgentState, agent, react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Value, includes, value_to_float
from inspect_ai.util import LimitExceededError

from inspect_swarm import Controller, StopReason, SwarmControl, member, swarm, swarm_controller


@swarm_controller
def until_proved() -> Controller:
    """Start every member, and stop the swarm when the first one ends `submitted`.

    Valid only when a member's normal return means a passed check, as `checked_solver()` makes it.
    """

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if event.submitted:
                    return "proved"
        return "all_done"

    return Controller(run)


@agent
def checked_solver(attempts: int = 5) -> Agent:
    """A `react()` member that returns normally only when one of its submissions passed the task's scorer."""
    passed = False
    to_float = value_to_float()

    def score_value(value: Value) -> float:
        nonlocal passed
        result = to_float(value)
        passed = passed or result == 1.0
        return result

    inner = react(attempts=AgentAttempts(attempts, score_value=score_value))

    async def execute(state: AgentState) -> AgentState:
        state = await inner(state)
        if not passed:
            # with no `source`, this ends only this member, as member_limit:custom
            raise LimitExceededError(
                "custom",
                value=0,
                limit=0,
                message="returned without a passing check",
            )
        return state

    return execute


@task
def stop_on_proof(k: int = 3, attempts: int = 5) -> Task:
    return Task(
        dataset=[Sample(input="What is six times seven? Submit the number.", target="42")],
        solver=swarm(
            members=member(checked_solver, {"attempts": attempts}, count=k),
            controller=until_proved(),
            channels=[],
        ),
        scorer=includes(),
    )
