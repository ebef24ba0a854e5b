"""The built-in activation policies: `round_robin()`, one member's model step at a time in
roster order, and `superstep()`, every member's step at once with a barrier."""

from collections.abc import Awaitable, Callable

import anyio

from .._contracts._control import ScheduledMember, SwarmControl
from .._contracts._controller import Controller, StopReason, swarm_controller


def _count(factory: str, arg: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{factory}({arg}=...): {arg} must be a whole number, 1 or more, not {value!r}."
        )
    return value


def _live(swarm: SwarmControl) -> list[ScheduledMember]:
    """The members still waiting for an activation, in roster order."""
    handles = [swarm.scheduled(m) for m in swarm.members]
    return [h for h in handles if h.waiting]


async def _step(member: ScheduledMember) -> None:
    # a member can end (a limit, the swarm's stop) between the policy's look and its turn
    if member.waiting:
        await member.activate("model_step")


async def _repeat(
    swarm: SwarmControl,
    times: int,
    step: Callable[[list[ScheduledMember]], Awaitable[None]],
    done: StopReason,
) -> StopReason:
    """Run `step` on the waiting members `times` times, or until none is left."""
    for _ in range(times):
        live = _live(swarm)
        if not live:
            return "all_done"
        await step(live)
    return done if _live(swarm) else "all_done"


@swarm_controller
def round_robin(max_rounds: int = 10) -> Controller:
    """Activate the members one at a time, in roster order: one model step each per round.

    Each round gives every member still waiting one activation of one model step (a
    generation and its tool calls), the next member starting only once the one before has
    reached its boundary, so a member sees what the members before it did in the same round.
    Members that have ended are skipped. After `max_rounds` rounds the swarm stops with the
    reason `max_rounds`, recorded as `policy:max_rounds`; if every member has ended before,
    with `all_done`.

    Args:
        max_rounds: The number of rounds, 1 or more.

    Returns:
        The policy.
    """
    rounds = _count("round_robin", "max_rounds", max_rounds)

    async def in_turn(live: list[ScheduledMember]) -> None:
        for member in live:
            await _step(member)

    async def run(swarm: SwarmControl) -> StopReason:
        return await _repeat(swarm, rounds, in_turn, "max_rounds")

    how = (
        "The members take turns in a fixed order: one step each per round, where a step is "
        "one reply and the tool calls it makes."
    )
    return Controller(run, instructions=how, policy=True)


@swarm_controller
def superstep(max_steps: int = 10) -> Controller:
    """Activate every waiting member for one model step at once, with a barrier after each step.

    The next step begins when every member has reached its boundary. Within a step, reads of
    the channels show only the records delivered before the step began (a read cutoff), so no
    member's step depends on how fast the others were; what members write in a step is seen
    from the next. After `max_steps` steps the swarm stops with the reason `max_steps`,
    recorded as `policy:max_steps`; if every member has ended before, with `all_done`.

    Args:
        max_steps: The number of steps, 1 or more.

    Returns:
        The policy.
    """
    steps = _count("superstep", "max_steps", max_steps)

    async def run(swarm: SwarmControl) -> StopReason:
        async def at_once(live: list[ScheduledMember]) -> None:
            with swarm.read_cutoff():
                async with anyio.create_task_group() as tg:
                    for member in live:
                        tg.start_soon(_step, member)

        return await _repeat(swarm, steps, at_once, "max_steps")

    how = (
        "The members act in steps, all at once: one reply and its tool calls each per step. "
        "What others write during a step is seen from the next step on."
    )
    return Controller(run, instructions=how, policy=True)
