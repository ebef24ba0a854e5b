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

    Put it among the member's tools, `react(tools=[bash(), swarm_tools()])`. The member's own
    loop receives the tools of each of the swarm's channels that has tools; a loop nested in it
    (the subagents of a `deepagent()` member, say) receives only the tools of channels whose
    `reach` is `"member"`. A loop that reaches a channel whose records wake waits, such as
    `shared_memory()`, also receives `swarm_wait`, to wait for the other members' work. The
    member's own loop is whichever loop resolves the tools first: for `react()` and
    `deepagent()` members, their top-level loop. Whichever loop calls a tool, it acts as the
    member.

    One member definition therefore works in swarms with any channels, or none, and outside a
    swarm it resolves to no tools at all.

    Returns:
        A tool source for the member's agent.
    """
    return _SwarmTools()
