"""The spec's example controllers and member builder, as written in the user guide.

`until_proved` and `checked_solver` are in `examples/stop_on_proof.py`, as written there.
"""

from collections.abc import Sequence
from contextlib import aclosing

from inspect_swarm import (
    Controller,
    MemberInfo,
    StopReason,
    SwarmControl,
    swarm_controller,
)


@swarm_controller
def escalate(first: str = "fast") -> Controller:
    """Start one member; start the others only if it ends without a submission."""

    def check(roster: Sequence[MemberInfo]) -> None:
        if first not in [m.name for m in roster]:
            raise ValueError(f"escalate(): no member is named {first!r}.")

    async def run(swarm: SwarmControl) -> StopReason:
        swarm.start(first)
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if event.submitted:
                    return "submitted"
        for m in swarm.members:
            if m.state == "pending":
                swarm.start(m)
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if event.submitted:
                    return "submitted"
        return "all_done"

    return Controller(run, check=check)


@swarm_controller
def prefer(role: str) -> Controller:
    """Answer with the first submission from a member with this role, if any."""

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
        chosen = False
        async with aclosing(swarm.events()) as events:
            async for event in events:
                if not chosen and event.submitted and swarm.member(event.member).role == role:
                    swarm.choose_answer(event.member, reason=f"first {role} to submit")
                    chosen = True
        return "all_done"

    return Controller(run)
