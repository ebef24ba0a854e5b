"""The `swarm_wait` tool, which the bus gives a loop that reaches a channel that wakes waits."""

import weakref
from typing import Protocol

from inspect_ai.tool import Tool, ToolDef, ToolError

from ..._contracts._record import RUN_ENDED


class Waits(Protocol):
    """The bus as its `swarm_wait` tool uses it."""

    @property
    def max_wait(self) -> int | None: ...

    async def wait(self, path: str | None, timeout: float | None) -> str:  # noqa: ASYNC109
        """Wait for news for the calling loop, and say what ended the wait."""
        ...


def swarm_wait(bus: Waits, path: str | None) -> Tool:
    """The `swarm_wait` tool of one run. It has a `path` argument, which `path` describes,
    only when a channel the loop reaches narrows its news by one (`Channel.wait_path`)."""

    # held weakly, as inspect_ai keeps every tool function it has described
    bus_ref = weakref.ref(bus)

    async def execute(path: str | None = None, timeout: int | None = None) -> str:  # noqa: ASYNC109
        """Wait until other members' work gives you something to look at.

        Returns at once if the swarm's channels have news for you (a change another member
        made that you have not looked at, a message to you) or another member has ended;
        otherwise blocks until there is. It also returns when every member is waiting, when
        the swarm stops, or after the timeout. The result names what changed by id and ended
        members by name, never content: read it with the channel's own tool. Use it instead
        of polling.

        Args:
            path: What to watch.
            timeout: The most seconds to wait.
        """
        live = bus_ref()
        if live is None:
            raise ToolError(RUN_ENDED)
        return await live.wait(path, timeout)

    limit = f"The most seconds to wait: at most {bus.max_wait}, which is also the default."
    tool = ToolDef(
        execute,
        name="swarm_wait",
        parameters={"path": path or "", "timeout": limit},
        parallel=False,
    )
    if path is None:
        del tool.parameters.properties["path"]
    return tool.as_tool()
