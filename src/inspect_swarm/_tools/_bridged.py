"""`swarm_bridged_tools()`: the tools of the swarm's channels, for a bridged member's agent."""

from __future__ import annotations

from inspect_ai.agent import BridgedToolsSpec

from .._context import current_member, current_swarm


def swarm_bridged_tools(name: str = "swarm") -> BridgedToolsSpec:
    """The tools of the swarm's channels, for a bridged member, as host tools of its bridge.

    A bridged member's agent runs in the sandbox and reaches tools on the host through the
    agent bridge, as an MCP server the bridge serves. Pass the result in the agent's
    `bridged_tools`, `claude_code(bridged_tools=[swarm_bridged_tools()])`, or to
    `sandbox_agent_bridge(bridged_tools=[...])` in an agent of your own. The member then
    gets the tools of every channel of the swarm that serves bridged members, such as the
    shared-memory board, messages, tasks and notes, and `swarm_wait`; each acts as the
    member, exactly as the tools `swarm_tools()` gives a native member do.

    Call it inside a registered member builder, passed to `member()` uncalled, so it resolves
    when the member starts. Outside a swarm, or in one with no channel with tools, the server
    has no tools. A bridged member gets no notices: it learns of news from the line that
    ends each tool's result, and from `swarm_wait`.

    Args:
        name: The name of the MCP server the bridge serves the tools as, which the agent
            sees in their names (`mcp__swarm__messages` for some agents).

    Returns:
        The bridged tools, for the agent's `bridged_tools`.
    """
    swarm = current_swarm()
    member = current_member()
    if swarm is None or member is None or swarm.bus is None:
        return BridgedToolsSpec(name=name, tools=[])
    return BridgedToolsSpec(name=name, tools=swarm.bus.channel_tools(member))
