"""The `coordinator()` controller: one member leads, the others start when the channels give
them work, and the swarm ends when the lead is done."""

from collections.abc import Sequence
from contextlib import aclosing

from .._contracts._control import MemberEnded, RecordDelivered, SwarmControl
from .._contracts._controller import Controller, FinalName, StopReason, swarm_controller
from .._contracts._roster import MemberInfo
from .._contracts._work import Assignment

_HOW = (
    "One member leads: it alone starts with the task, and it gives the others work through "
    "the swarm's channels, as a task assigned to a member or a message to it. A member starts "
    "once it has work, does it and reports back the same way. When the lead is done, the "
    "work ends and the lead's answer is the swarm's."
)


@swarm_controller
def coordinator(lead: str | None = None, *, final: FinalName | None = None) -> Controller:
    """One member leads: it starts with the task, hands out the work, and gives the answer.

    The lead starts alone, with the swarm's input. Another member starts once a channel has
    given it work: a task assigned to it on `tasks()`, or a message to it (by name, role or
    `all`) on `messages()`, from the lead or from a member already at work. Its input names
    that work by id, and it reads the work itself with the channel's tools. A member that is
    never given work never starts.

    When the lead ends, the swarm stops with the reason `lead_done`, recorded as
    `controller:lead_done`, and members still at work get the stop. A lead that ended with a
    submission gives the answer: the result record shows mode `controller` and the lead. A
    lead that ended without one (a limit, no submission) leaves the answer to `final`, among
    the other members' submissions.

    `swarm()` refuses a lead that is not in the roster, and a swarm with no channel that
    hands out work (`Channel.hands_out_work`), such as `tasks()` or `messages()`.

    Args:
        lead: The name of the member that leads. `None` means the first member of the roster.
        final: How the swarm chooses its answer when the lead has none: `first` (the default,
            for `None`) or `last`.
    """
    if lead is not None and (not isinstance(lead, str) or not lead):
        refusal = TypeError if not isinstance(lead, str) else ValueError
        raise refusal(
            f"coordinator(lead=...): lead must be a member's name, not {lead!r}. Pass the "
            "name of the member that leads, or None for the first member."
        )

    def check(roster: Sequence[MemberInfo]) -> None:
        names = [m.name for m in roster]
        if lead is not None and lead not in names:
            raise ValueError(
                f"coordinator(lead=...): {lead!r} is not a member of the roster "
                f"({', '.join(names)}). Name one of them, or leave lead out for the first."
            )

    async def run(swarm: SwarmControl) -> StopReason:
        head = swarm.member(lead) if lead is not None else swarm.members[0]
        swarm.start(head)
        async with aclosing(swarm.events(RecordDelivered, MemberEnded)) as events:
            async for event in events:
                if isinstance(event, MemberEnded) and event.member == head.name:
                    break
                if isinstance(event, RecordDelivered):
                    _start_on_work(swarm)
        if head.submitted:
            swarm.choose_answer(head, reason="the lead's answer")
        return "lead_done"

    return Controller(run, final=final, check=check, instructions=_HOW, needs_work=True)


def _start_on_work(swarm: SwarmControl) -> None:
    """Start each member that has not started and has been given work."""
    for m in swarm.members:
        if m.state == "pending" and (work := swarm.assigned(m)):
            swarm.start(m, _work_input(work))


def _work_input(work: Sequence[Assignment]) -> str:
    """A starting member's input: its work, by id and channel, never what anyone wrote."""
    items = "; ".join(f"{a.kind} {a.id} from {a.by} ({a.channel})" for a in work)
    return (
        f"You have been given work: {items}. Read it with the tools of the channels named, do "
        "it, and report back through them."
    )
