"""The `rounds()` controller: members answer in synchronous rounds, each seeing every member's
latest answer, as in a debate."""

from collections.abc import AsyncIterator

from .._contracts._control import MemberEnded, SwarmControl, SwarmEvent, TurnEnded
from .._contracts._controller import Controller, FinalName, StopReason, swarm_controller
from ._vote import choose_by_vote


@swarm_controller
def rounds(n: int = 2, *, vote: bool = False, final: FinalName | None = None) -> Controller:
    """Run the members in `n` synchronous rounds, each seeing the others' answers: a debate.

    In the first round every member answers the swarm's input. In each later round, once
    every member has finished the round before, each runs its agent again on the swarm's
    input, its preamble and a message with every member's latest answer, its own included.
    A member that ends early (a limit, an error) is shown with its last answer, or none,
    and takes no more turns. After the last round the swarm stops with the reason
    `rounds_done`, recorded as `controller:rounds_done`; if every member ends before, with
    `all_done`.

    Each member's limits cover all its rounds, and the time it waits for the others between
    them. The answers a member sees are in its next turn's input, in the transcript.

    Args:
        n: The number of rounds, 1 or more. With 1 the members answer once, unseen.
        vote: Answer with the majority of the members' latest submissions (the final round's,
            or an earlier one for a member a limit ended before it), as `vote()` chooses it,
            instead of by the `final` rule.
        final: How the swarm chooses its answer from the final round's submissions: `first`
            (the default, for `None`) or `last`.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(
            f"rounds(n=...): n must be a whole number of rounds, 1 or more, not {n!r}."
        )
    if vote and final is not None:
        raise ValueError(
            f"rounds(vote=True, final={final!r}): the vote chooses the answer, so final has "
            "nothing to choose. Pass one of them."
        )

    async def run(swarm: SwarmControl) -> StopReason:
        names = [m.name for m in swarm.members]
        for m in swarm.members:
            swarm.start(m, turns=n > 1)
        done: StopReason = "rounds_done"
        events = swarm.events(MemberEnded, TurnEnded)
        try:
            for turn in range(2, n + 1):
                await _round_ends(swarm, events)
                waiting = [m for m in swarm.members if m.state == "running"]
                if not waiting:
                    done = "all_done"
                    break
                for m in waiting:
                    swarm.next_turn(m, show=names, last=turn == n)
            async for _ in events:
                pass  # the final round ends the members
        finally:
            await events.aclose()
        if vote:
            choose_by_vote(swarm)
        return done

    how = (
        f"The members answer in {n} rounds: after each round, every member sees the latest "
        "answers of all and answers again."
        if n > 1
        else "Each member answers once, on its own."
    )
    return Controller(run, final=final, instructions=how)


async def _round_ends(swarm: SwarmControl, events: AsyncIterator[SwarmEvent]) -> None:
    """Wait until every member still running has finished its turn of the round."""
    busy = {m.name for m in swarm.members if m.state == "running"}
    while busy:
        event = await anext(events)
        assert isinstance(event, MemberEnded | TurnEnded)
        busy.discard(event.member)
