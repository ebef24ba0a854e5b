"""The `vote()` controller: every member answers, and the answer most of them agree on wins."""

from collections.abc import Sequence
from contextlib import aclosing

from .._contracts._control import SwarmControl
from .._contracts._controller import Controller, StopReason, swarm_controller
from .._contracts._roster import MemberInfo


@swarm_controller
def vote(stop_at_majority: bool = False) -> Controller:
    """Start every member; when all have ended, answer with the submission most of them agree on.

    Submissions are compared without case and with runs of whitespace as one space. The
    largest group of equal answers wins, and a tie goes to the group whose first submission
    came earliest; the swarm's answer is that group's earliest submission. The result record
    gives the mode `controller` and a reason with the tally, such as
    `vote: 2 of 3 submissions agree (2: b, c; 1: a)`. The swarm stops with `all_done`.

    Args:
        stop_at_majority: Stop as soon as one answer has the votes of more than half the
            roster, which the others can no longer overturn. The swarm then stops with the
            reason `majority`, recorded as `controller:majority`.
    """

    def check(roster: Sequence[MemberInfo]) -> None:
        if len(roster) < 2:
            raise ValueError(
                f"vote(): a vote needs at least 2 members, and this swarm has {len(roster)}. "
                "Add members (member(..., count=3)), or use leaderless() for a swarm of one."
            )

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
        reason: StopReason = "all_done"
        half = len(swarm.members) / 2
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if stop_at_majority and event.submitted and _largest(swarm.agreement()) > half:
                    reason = "majority"
                    break
        choose_by_vote(swarm)
        return reason

    return Controller(
        run,
        check=check,
        instructions="Each member answers on its own, and the answer most members agree on is "
        "the swarm's.",
    )


def choose_by_vote(swarm: SwarmControl) -> None:
    """Choose the answer most members agree on, with the tally as the reason; choose nothing
    when none submitted."""
    # largest first; sorted() is stable, so the earliest group goes first on a tie
    groups = sorted(swarm.agreement(), key=len, reverse=True)
    if not groups:
        return
    winner = groups[0]
    total = sum(len(group) for group in groups)
    tally = "; ".join(f"{len(group)}: {', '.join(group)}" for group in groups)
    swarm.choose_answer(
        winner[0], reason=f"vote: {len(winner)} of {total} submissions agree ({tally})"
    )


def _largest(groups: list[list[str]]) -> int:
    return max((len(group) for group in groups), default=0)
