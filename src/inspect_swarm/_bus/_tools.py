from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from inspect_ai.tool import Tool, ToolDef, ToolError, ToolSource

from .._context import current_member, current_swarm
from ._record import RUN_ENDED

if TYPE_CHECKING:
    from ._bus import Bus


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


def swarm_wait(bus: Bus) -> Tool:
    """The `swarm_wait` tool of one run."""

    # held weakly, as inspect_ai keeps every tool function it has described
    bus_ref = weakref.ref(bus)

    async def execute(path: str | None = None, timeout: int | None = None) -> str:  # noqa: ASYNC109
        """Wait until other members' work gives you something to look at.

        Returns at once if a shared memory file you watch has a change you did not write and
        have not viewed, or another member has ended; otherwise blocks until that happens.
        It also returns when every member is waiting, when the swarm stops, or after the
        timeout. The result names changed files by id and ended members by name: view a file
        with the shared_memory tool to read it. Use it instead of polling.

        Args:
            path: The shared memory file or directory to watch (a path under /shared_memory
                or a file id such as f-3). The whole board if not given.
            timeout: The most seconds to wait.
        """
        live = bus_ref()
        if live is None:
            raise ToolError(RUN_ENDED)
        return await live.wait(path, timeout)

    limit = f"The most seconds to wait: at most {bus.max_wait}, which is also the default."
    return ToolDef(
        execute, name="swarm_wait", parameters={"timeout": limit}, parallel=False
    ).as_tool()
