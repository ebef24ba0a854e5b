"""MCP tools named after the CLI's commands: swarms_run, _list, _get, _cancel, _results.

Needs the `mcp` extra. Works with the `mcp` SDK 2 (`MCPServer`) and 1 (`FastMCP`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from ._client import AsyncSwarmsClient

_Tool = TypeVar("_Tool", bound=Callable[..., Any])


class McpServer(Protocol):
    """What this module uses of the SDK's server (MCPServer in mcp 2, FastMCP in mcp 1)."""

    def tool(self) -> Callable[[_Tool], _Tool]:
        """Register a function as a tool."""
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


def build_mcp_server(client: AsyncSwarmsClient) -> McpServer:
    """An MCP server whose tools call the Swarms API through `client`."""
    server = _new_server(
        "inspect-swarm",
        "Run one shell command on many isolated sandboxes at once (a swarm run), follow it, "
        "and collect each sandbox's exit code, output tails and result.",
    )

    @server.tool()
    async def swarms_run(
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
        run = await client.swarms.start(
            command,
            count=count,
            inputs=inputs,
            size=size,
            timeout_seconds=timeout_seconds,
            concurrency=concurrency,
            result_path=result_path,
            name=name,
        )
        return await client.swarms.wait(run["id"]) if wait else run

    @server.tool()
    async def swarms_list() -> dict[str, Any]:
        """Your swarm runs, newest first."""
        return {"swarms": await client.swarms.list()}

    @server.tool()
    async def swarms_get(swarm_id: str) -> dict[str, Any]:
        """A swarm run with every sandbox's status, exit code, output tails and result."""
        return await client.swarms.get(swarm_id)

    @server.tool()
    async def swarms_cancel(swarm_id: str) -> dict[str, Any]:
        """Cancel a run: queued sandboxes never start, running ones stop."""
        return await client.swarms.cancel(swarm_id)

    @server.tool()
    async def swarms_results(swarm_id: str) -> dict[str, Any]:
        """Every sandbox's result record, in input order."""
        return {"results": await client.swarms.results(swarm_id)}

    return server


def serve_mcp(api_key: str | None = None, base_url: str | None = None) -> None:
    """Serve the tools over stdio until the client disconnects."""
    client = AsyncSwarmsClient(api_key=api_key, base_url=base_url)
    build_mcp_server(client).run()
