"""`inspect-swarm mcp` as an MCP client starts it: over stdio, driven by the `mcp` SDK's own
client, against a real server."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from inspect_swarm.client import AsyncSwarmsClient

from ..servers import KEY, Server, needs_namespaces

mcp = pytest.importorskip("mcp")
pytestmark = [needs_namespaces, pytest.mark.anyio]

HOSTED = {"start_swarm", "list_swarms", "get_swarm", "cancel_swarm", "get_swarm_results"}
CLI = {"swarms_run", "swarms_list", "swarms_get", "swarms_cancel", "swarms_results"}
RUN_PARAMETERS = {
    "command",
    "count",
    "inputs",
    "size",
    "timeout",
    "template",
    "image",
    "env",
    "files",
    "resultPath",
    "concurrency",
    "name",
    "idempotencyKey",
    "wait",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SDK's stdio client; the server side runs in its own process


@asynccontextmanager
async def session(server: Server, *names: str, mode: str = "auto") -> AsyncIterator[Any]:
    """The SDK's client, talking to `inspect-swarm mcp` started as a subprocess."""
    from mcp import Client, StdioServerParameters

    env = {**os.environ, "MARITIME_API_URL": server.url, "MARITIME_API_KEY": KEY}
    command = ["-m", "inspect_swarm.cli", "mcp", *names]
    params = StdioServerParameters(command=sys.executable, args=command, env=env)
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        yield client


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    structured = getattr(result, "structured_content", None)
    return dict(structured) if structured else dict(json.loads(result.content[0].text))


def _schema(tool: Any) -> dict[str, Any]:
    return dict(getattr(tool, "input_schema", None) or tool.inputSchema)


async def test_swarms_tools(server: Server) -> None:
    async with session(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == CLI
        run = _data(
            await client.call_tool(
                "swarms_run", {"command": "echo mcp", "count": 2, "size": "1x1", "wait": True}
            )
        )
        assert run["status"] == "completed"
        results = _data(await client.call_tool("swarms_results", {"swarm_id": run["id"]}))
        assert [r["stdoutTail"] for r in results["results"]] == ["mcp\n", "mcp\n"]
        # an id prefix is taken, as everywhere
        got = _data(await client.call_tool("swarms_get", {"swarm_id": run["id"][:8]}))
        assert got["id"] == run["id"]
        listed = _data(await client.call_tool("swarms_list", {}))
        assert any(r["id"] == run["id"] for r in listed["swarms"])
        cancelled = _data(await client.call_tool("swarms_cancel", {"swarm_id": run["id"]}))
        assert cancelled["status"] == "completed"


async def test_the_run_tool_takes_what_the_api_takes(server: Server) -> None:
    async with session(server) as client:
        [tool] = [t for t in (await client.list_tools()).tools if t.name == "swarms_run"]
        schema = _schema(tool)
        assert set(schema["properties"]) == RUN_PARAMETERS
        assert schema["required"] == ["command"]
        # each parameter says what it does
        assert all(len(p.get("description", "")) > 20 for p in schema["properties"].values())
        run = _data(
            await client.call_tool(
                "swarms_run",
                {
                    "command": ["sh", "-c", 'echo "$GREETING $1" > /out; cat /in', "sh"],
                    "inputs": [
                        {"args": ["one"], "files": {"/in": "first"}},
                        {"args": ["two"], "env": {"GREETING": "bye"}, "files": {"/in": "2nd"}},
                    ],
                    "env": {"GREETING": "hello"},
                    "size": {"vcpus": 1, "memoryGb": 1},
                    "timeout": 60,
                    "template": "base",
                    "resultPath": "/out",
                    "concurrency": 1,
                    "name": "from-mcp",
                    "wait": True,
                },
            )
        )
    assert (run["name"], run["concurrency"], run["timeoutSeconds"]) == ("from-mcp", 1, 60)
    assert [(s["result"], s["stdoutTail"]) for s in run["sandboxes"]] == [
        ("hello one\n", "first"),
        ("bye two\n", "2nd"),
    ]


async def test_a_bad_call_is_told_to_the_model_and_the_server_goes_on(server: Server) -> None:
    async with session(server) as client:
        bad = await client.call_tool("swarms_run", {"command": "true", "count": 1, "size": 3})
        assert bad.is_error and "size" in bad.content[0].text and "2x4" in bad.content[0].text
        refused = await client.call_tool("swarms_run", {"command": "true", "timeout": 5})
        assert refused.is_error and "count" in refused.content[0].text
        unknown = await client.call_tool("swarms_run", {"command": "true", "cont": 2})
        assert unknown.is_error and "cont" in unknown.content[0].text
        assert (await client.list_tools()).tools  # still serving


async def test_hosted_tool_names_and_the_legacy_handshake(server: Server) -> None:
    async with session(server, "--names", "hosted", mode="legacy") as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == HOSTED
        run = _data(
            await client.call_tool(
                "start_swarm", {"command": "echo hosted", "count": 1, "size": "1x1", "wait": True}
            )
        )
        results = _data(await client.call_tool("get_swarm_results", {"swarm_id": run["id"]}))
        assert [r["stdoutTail"] for r in results["results"]] == ["hosted\n"]
        listed = _data(await client.call_tool("list_swarms", {}))
        assert listed["swarms"][0]["id"] == run["id"]
    async with session(server, "--names", "both") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == HOSTED | CLI
        # one implementation under both names: the same description and parameters
        assert tools["get_swarm"].description == tools["swarms_get"].description
        assert _schema(tools["start_swarm"]) == _schema(tools["swarms_run"])
        got = _data(await client.call_tool("get_swarm", {"swarm_id": run["id"]}))
        assert got == _data(await client.call_tool("swarms_get", {"swarm_id": run["id"]}))


def test_tool_names_are_checked_and_chosen_on_the_command_line() -> None:
    from inspect_swarm.cli._main import build_parser
    from inspect_swarm.cli._mcp import McpServer

    api = AsyncSwarmsClient(api_key=KEY, base_url="http://127.0.0.1:9")
    with pytest.raises(
        ValueError, match="names: expected 'cli', 'hosted' or 'both', got 'maritime'"
    ):
        McpServer(api, "maritime")  # type: ignore[arg-type]
    assert build_parser().parse_args(["mcp"]).names == "cli"
    assert build_parser().parse_args(["mcp", "--names", "hosted"]).names == "hosted"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["mcp", "--names", "maritime"])
