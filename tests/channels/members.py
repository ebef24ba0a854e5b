"""Board members and script steps for the channel tests that run real swarms."""

from __future__ import annotations

from typing import Any

from inspect_ai.agent import Agent, agent, react

from inspect_swarm import swarm_on_continue, swarm_tools

F = "/shared_memory"


def sm(**arguments: Any) -> dict[str, Any]:
    """A scripted call of the `shared_memory` tool."""
    return {"tool": "shared_memory", "arguments": arguments}


WAIT: dict[str, Any] = {"tool": "swarm_wait", "arguments": {}}


@agent
def board_member(hook: str = "default") -> Agent:
    """A react member with the swarm's tools and notices."""
    if hook == "none":
        return react(tools=[swarm_tools()])
    return react(tools=[swarm_tools()], on_continue=swarm_on_continue())
