"""The `quiescence()` controller: every member starts at once, and the swarm ends when nothing is
left to do: every member waits, and no channel holds open work."""

from .._contracts._controller import Controller, FinalName, swarm_controller
from ._stops import quiescent_condition, run_until


@swarm_controller
def quiescence(settle: float = 2.0, *, final: FinalName | None = None) -> Controller:
    """Start every member; stop when every member has been waiting for `settle` seconds and no
    channel holds open work.

    For teams that keep working after a submission: a member's submission ends only that
    member, and the swarm goes on until the members that remain all wait in `swarm_wait` with
    nothing left to do, then stops with the reason `quiescence`. Members wait only in a swarm
    with a channel that gives `swarm_wait`, such as `shared_memory()`; ended members and
    members not yet started count as waiting. A channel with tasks or messages says what is
    still open through `SwarmControl.outstanding()`; while anything is, the waits end as usual with
    `all_waiting` so that members take it up. If every member ends first, the swarm ends with
    `all_done`.

    Args:
        settle: Seconds every member must stay waiting before the swarm stops. The waits stay
            blocked meanwhile.
        final: How the swarm chooses its answer from the submissions: `first` (the default,
            for `None`) or `last`, the latest, for a team whose members build on each other's
            work.
    """
    return run_until(
        quiescent_condition(settle, "quiescence"),
        final,
        "The members share the work through the swarm's channels, and the work ends when every "
        "member is waiting with nothing left to do.",
    )
