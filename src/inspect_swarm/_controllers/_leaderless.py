"""The `leaderless()` controller: every member starts at once; by default the first submission
ends the swarm."""

from contextlib import aclosing

from .._contracts._control import SwarmControl
from .._contracts._controller import Controller, FinalName, StopReason, swarm_controller


@swarm_controller
def leaderless(stop_on_submission: bool = True, *, final: FinalName | None = None) -> Controller:
    """Start every member with the swarm's input; stop at the first submission, or when all have ended.

    By default the swarm stops when the first member submits. The swarm's answer is the first
    submission, so nothing the other members do after it can change the answer. The members
    still running are stopped: they finish the calls they have in flight, within
    `Budget.grace`, and the ones still running after it are cancelled.

    Pass `stop_on_submission=False` to let every member run to its end when the other members'
    work still matters: tasks whose scorer reads a shared artifact (such as the sandbox) after
    the members end; arms that measure each member's result (team@k); and agents for which any
    normal return counts as a submission. Add `final="last"` to make the latest submission the
    answer, for a team whose members build on each other's work.

    Args:
        stop_on_submission: Stop the swarm when the first member ends with a submission.
        final: How the swarm chooses its answer from the submissions: `first`, the earliest, or
            `last`, the latest. A tie goes to the member listed first. `None` is the default,
            `first`. `last` needs `stop_on_submission=False`.
    """
    if final == "last" and stop_on_submission:
        raise ValueError(
            'leaderless(final="last") needs stop_on_submission=False: a swarm that stops at the '
            "first submission has no later one. Pass leaderless(stop_on_submission=False, "
            'final="last").'
        )

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if stop_on_submission and event.submitted:
                    return "submitted"
        return "all_done"

    return Controller(run, final=final)
