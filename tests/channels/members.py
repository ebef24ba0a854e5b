"""Members, script steps and log readers for the channel tests that run real swarms."""

from __future__ import annotations

from typing import Any

from inspect_ai.agent import Agent, agent, react
from inspect_ai.event import InfoEvent, SpanBeginEvent
from inspect_ai.log import EvalSample

from inspect_swarm import swarm_on_continue, swarm_tools

from ..runtime.helpers import info_events

F = "/shared_memory"


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted call of a channel's tool."""
    return {"tool": name, "arguments": arguments}


def sm(**arguments: Any) -> dict[str, Any]:
    """A scripted call of the `shared_memory` tool."""
    return tool("shared_memory", **arguments)


WAIT: dict[str, Any] = {"tool": "swarm_wait", "arguments": {}}


@agent
def board_member(hook: str = "default") -> Agent:
    """A react member with the swarm's tools and notices."""
    if hook == "none":
        return react(tools=[swarm_tools()])
    return react(tools=[swarm_tools()], on_continue=swarm_on_continue())


def spans(sample: EvalSample) -> dict[str, SpanBeginEvent]:
    return {e.id: e for e in sample.events if isinstance(e, SpanBeginEvent)}


def comm(sample: EvalSample, kind: str | None = None) -> list[InfoEvent]:
    """The sample's `comm` evidence events, or those of one kind."""
    return [
        e
        for e in info_events(sample, "comm")
        if kind is None or (isinstance(e.data, dict) and e.data["kind"] == kind)
    ]


def member_span(sample: EvalSample, name: str) -> str:
    """The id of the member's own agent span."""
    [span] = [s.id for s in spans(sample).values() if s.type == "agent" and s.name == name]
    return span
