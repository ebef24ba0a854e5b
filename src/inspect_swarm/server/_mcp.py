"""MCP tools for the Swarms API, under the CLI's names, the hosted server's, or both.

The CLI's own MCP server names every tool after its command (`swarms_run`, `swarms_list`,
`swarms_get`, `swarms_cancel`, `swarms_results`); the hosted Maritime MCP server has the same
calls as `start_swarm`, `list_swarms`, `get_swarm`, `cancel_swarm` and `get_swarm_results`.
Each call has one implementation, registered under the names asked for.

Needs the `mcp` extra. Works with the `mcp` SDK 2 (`MCPServer`) and 1 (`FastMCP`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar, cast

from ._client import AsyncSwarmsClient

_Tool = TypeVar("_Tool", bound=Callable[..., Any])

ToolNames = Literal["cli", "hosted", "both"]

TOOL_NAMES: dict[str, tuple[str, str]] = {
    "run": ("swarms_run", "start_swarm"),
    "list": ("swarms_list", "list_swarms"),
    "get": ("swarms_get", "get_swarm"),
    "cancel": ("swarms_cancel", "cancel_swarm"),
    "results": ("swarms_results", "get_swarm_results"),
}
"""Each call's tool name in the CLI's MCP server and in the hosted one."""


class McpServer(Protocol):
    """What this module uses of the SDK's server (MCPServer in mcp 2, FastMCP in mcp 1)."""

    def tool(self, name: str | None = None) -> Callable[[_Tool], _Tool]:
        """Register a function as a tool (named `name`, else after the function)."""
        ...

    def run(self) -> None:
        """Serve over stdio."""
        ...


def _new_server(name: str, instructions: str) -> McpServer:
    import importlib

    try:
        server_class = importlib.import_module("mcp.server.mcpserver").MCPServer
    except ImportError:  # mcp 1.x
        server_class = importlib.import_module("mcp.server.fastmcp").FastMCP
    return cast(McpServer, server_class(name, instructions=instructions))


def _tools(client: AsyncSwarmsClient) -> dict[str, Callable[..., Any]]:
    """One implementation of each call, keyed as `TOOL_NAMES`."""

    async def run(
        command: str,
        count: int | None = None,
        inputs: list[dict[str, Any]] | None = None,
        size: str | None = None,
        timeout_seconds: int | None = None,
        concurrency: int | None = None,
        result_path: str | None = None,
        name: str | None = None,
        wait: bool = False,
    ) -> dict[str, Any]:
        """Start a swarm run: `command` on `count` sandboxes, or one per input.

        Each input is {"args": [...], "env": {...}, "files": {"/abs/path": "content"}}.
        `size` is VCPUSxGB such as "2x4"; `timeout_seconds` is per sandbox. With `wait`,
        returns the finished run; otherwise the started one.
        """
        started = await client.swarms.start(
            command,
            count=count,
            inputs=inputs,
            size=size,
            timeout_seconds=timeout_seconds,
            concurrency=concurrency,
            result_path=result_path,
            name=name,
        )
        return await client.swarms.wait(started["id"]) if wait else started

    async def list_runs() -> dict[str, Any]:
        """Your swarm runs, newest first."""
        return {"swarms": await client.swarms.list()}

    async def get(swarm_id: str) -> dict[str, Any]:
        """A swarm run with every sandbox's status, exit code, output tails and result."""
        return await client.swarms.get(swarm_id)

    async def cancel(swarm_id: str) -> dict[str, Any]:
        """Cancel a run: queued sandboxes never start, running ones stop."""
        return await client.swarms.cancel(swarm_id)

    async def results(swarm_id: str) -> dict[str, Any]:
        """Every sandbox's result record, in input order."""
        return {"results": await client.swarms.results(swarm_id)}

    return {"run": run, "list": list_runs, "get": get, "cancel": cancel, "results": results}


def build_mcp_server(client: AsyncSwarmsClient, names: ToolNames = "cli") -> McpServer:
    """An MCP server whose tools call the Swarms API through `client`.

    Args:
        client: The API client the tools call.
        names: `cli` (`swarms_run`...), `hosted` (`start_swarm`...) or `both`.
    """
    if names not in ("cli", "hosted", "both"):
        raise ValueError(f"names: expected 'cli', 'hosted' or 'both', got {names!r}")
    server = _new_server(
        "inspect-swarm",
        "Run one shell command on many isolated sandboxes at once (a swarm run), follow it, "
        "and collect each sandbox's exit code, output tails and result.",
    )
    wanted = {"cli": (0,), "hosted": (1,), "both": (0, 1)}[names]
    for call, tool in _tools(client).items():
        for which in wanted:
            server.tool(name=TOOL_NAMES[call][which])(tool)
    return server


def serve_mcp(
    api_key: str | None = None, base_url: str | None = None, names: ToolNames = "cli"
) -> None:
    """Serve the tools over stdio until the client disconnects."""
    client = AsyncSwarmsClient(api_key=api_key, base_url=base_url)
    build_mcp_server(client, names).run()
