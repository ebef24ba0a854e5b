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


def swarm_wait(bus: Waits) -> Tool:
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
