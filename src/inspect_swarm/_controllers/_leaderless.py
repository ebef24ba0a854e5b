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

    Out of the box, the first member to submit ends the swarm, and its submission is the
    answer: the others can no longer change it. The members that are still running get the
    stop: they have up to `Budget.grace` to finish the calls in flight, after which any still
    running are cancelled.

    With `stop_on_submission=False`, every member runs until it ends. That suits cases where
    the other members' work still counts: a scorer that reads something shared, such as the
    sandbox, once the members are done; an arm that measures each member's result (team@k);
    agents whose every normal return counts as a submission. For a team whose members build on
    one another's work, `final="last"` makes the latest submission the answer.

    Pass `stop` to decide when the swarm is done with a stop condition instead, such as
    `any_of(verified_pass(), stall(40))`.

    Args:
        stop_on_submission: End the swarm as soon as a member ends with a submission.
        final: The rule that picks the answer among the submissions: `first` takes the
            earliest, `last` the latest, and of two at the same moment the member earlier in
            the roster wins. `None` means `first`. `last` requires `stop_on_submission=False`.
        stop: A stop condition that ends the swarm in place of `stop_on_submission`; put
            `submission()` in it to keep stopping at the first submission. The swarm still
            ends with `all_done` when every member has ended first.

    Returns:
        The controller.

    Raises:
        TypeError: `stop` is not a stop condition.
        ValueError: `final="last"` with `stop_on_submission=True`, or `stop` with
            `stop_on_submission=False`.
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
