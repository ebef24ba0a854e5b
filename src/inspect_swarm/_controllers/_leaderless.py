"""The `leaderless()` controller: every member starts at once; by default the first submission
ends the swarm."""

from contextlib import aclosing

from .._contracts._control import SwarmControl
from .._contracts._controller import Controller, FinalName, StopReason, swarm_controller


@swarm_controller
def leaderless(stop_on_submission: bool = True, *, final: FinalName | None = None) -> Controller:
    """Start every member with the swarm's input; stop at the first submission, or when all have ended.

    Out of the box, the first member to submit ends the swarm, and its submission is the
    answer: the others can no longer change it. The members that are still running get the
    stop: they have up to `Budget.grace` to finish the calls in flight, after which any still
    running are cancelled.

    With `stop_on_submission=False`, every member runs until it ends. That suits cases where
    the other members' work still counts: a scorer that reads something shared, such as the
    sandbox, once the members are done; an arm that measures each member's result (team@k);
    agents whose every normal return counts as a submission. For a team whose members build on
    one another's work, `final="last"` makes the latest submission the answer.

    Args:
        stop_on_submission: End the swarm as soon as a member ends with a submission.
        final: The rule that picks the answer among the submissions: `first` takes the
            earliest, `last` the latest, and of two at the same moment the member earlier in
            the roster wins. `None` means `first`. `last` requires `stop_on_submission=False`.

    Returns:
        The controller.

    Raises:
        ValueError: `final="last"` with `stop_on_submission=True`.
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
