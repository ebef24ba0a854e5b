"""`swarm_tools()`: the tools of the swarm's channels, for a member's agent."""

from __future__ import annotations

from inspect_ai.tool import Tool, ToolSource

from .._context import current_member, current_swarm


class _SwarmTools(ToolSource):
    async def tools(self) -> list[Tool]:
        swarm = current_swarm()
        member = current_member()
        if swarm is None or member is None or swarm.bus is None:
            return []
        return swarm.bus.channel_tools(member)


def swarm_tools() -> ToolSource:
    """The tools of the swarm's channels, for a member's agent.

    Pass it in the member's tools, `react(tools=[bash(), swarm_tools()])`. The member's own
    loop gets the tools of every channel of the swarm that has them; its nested loops, such
    as a `deepagent()` member's subagents, get only those of channels whose `reach` is
    `"member"`. A loop also gets `swarm_wait`, which waits for other members' work, when one
    of the channels it reaches wakes waits, as `shared_memory()` does. The member's own loop
    is the first in which the tools are resolved, which for `react()` and `deepagent()`
    members is their top-level loop. Each tool acts as the member, whichever loop calls it.

    The same member definition serves swarms with different channels, and one with none.
    Outside a swarm it gives no tools.

    Returns:
        A tool source for the member's agent.
    """
    return _SwarmTools()
