"""The `leaderless()` controller: every member starts at once; by default the first submission
ends the swarm."""

from .._contracts._controller import Controller, FinalName, swarm_controller
from ._stops import StopCondition, run_until, submission


@swarm_controller
def leaderless(
    stop_on_submission: bool = True,
    *,
    final: FinalName | None = None,
    stop: StopCondition | None = None,
) -> Controller:
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

    Pass `stop` to decide when the swarm is done with a stop condition instead, such as
    `any_of(verified_pass(), stall(40))`.

    Args:
        stop_on_submission: Stop the swarm when the first member ends with a submission.
        final: How the swarm chooses its answer from the submissions: `first`, the earliest, or
            `last`, the latest. A tie goes to the member listed first. `None` is the default,
            `first`. `last` needs `stop_on_submission=False`.
        stop: A stop condition that ends the swarm in place of `stop_on_submission`; put
            `submission()` in it to keep stopping at the first submission. The swarm still
            ends with `all_done` when every member has ended first.
    """
    if stop is not None and not isinstance(stop, StopCondition):
        raise TypeError(
            f"leaderless(stop=...): {stop!r} is not a stop condition. Pass one such as "
            "any_of(submission(), stall(40))."
        )
    if stop is not None and not stop_on_submission:
        raise ValueError(
            "leaderless(stop_on_submission=False, stop=...): the stop condition replaces "
            "stop_on_submission, so pass only stop=, with submission() in it if a submission "
            "should end the swarm."
        )
    if final == "last" and stop_on_submission and stop is None:
        raise ValueError(
            'leaderless(final="last") needs stop_on_submission=False: a swarm that stops at the '
            "first submission has no later one. Pass leaderless(stop_on_submission=False, "
            'final="last").'
        )
    if stop is None and stop_on_submission:
        stop = submission()
    return run_until(stop, final)
