"""The MCP tools, called in-process through the SDK's client, against a real server."""

from __future__ import annotations

import json

import pytest

from inspect_swarm.server import AsyncSwarmsClient

from .conftest import KEY, Server, needs_namespaces

mcp = pytest.importorskip("mcp")
pytestmark = [needs_namespaces, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _data(result: object) -> dict[str, object]:
    structured = getattr(result, "structured_content", None) or getattr(
        result, "structuredContent", None
    )
    if structured:
        return dict(structured.get("result", structured))
    return dict(json.loads(result.content[0].text))  # type: ignore[attr-defined]


async def test_swarms_tools(server: Server) -> None:
    from mcp import Client

    from inspect_swarm.server._mcp import build_mcp_server

    api = AsyncSwarmsClient(api_key=KEY, base_url=server.url, poll_interval=0.1)
    async with Client(build_mcp_server(api)) as session:  # type: ignore[arg-type]
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert names == {
            "swarms_run",
            "swarms_list",
            "swarms_get",
            "swarms_cancel",
            "swarms_results",
        }
        run = _data(
            await session.call_tool(
                "swarms_run", {"command": "echo mcp", "count": 2, "size": "1x1", "wait": True}
            )
        )
        assert run["status"] == "completed"
        results = _data(await session.call_tool("swarms_results", {"swarm_id": run["id"]}))
        assert [r["stdoutTail"] for r in results["results"]] == ["mcp\n", "mcp\n"]  # type: ignore[attr-defined]
        got = _data(await session.call_tool("swarms_get", {"swarm_id": run["id"]}))
        assert got["id"] == run["id"]
        listed = _data(await session.call_tool("swarms_list", {}))
        assert any(r["id"] == run["id"] for r in listed["swarms"])  # type: ignore[attr-defined]
        cancelled = _data(await session.call_tool("swarms_cancel", {"swarm_id": run["id"]}))
        assert cancelled["status"] == "completed"
    await api.aclose()


def _schema(tool: object) -> object:
    return getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)


HOSTED = {"start_swarm", "list_swarms", "get_swarm", "cancel_swarm", "get_swarm_results"}
CLI = {"swarms_run", "swarms_list", "swarms_get", "swarms_cancel", "swarms_results"}


async def test_hosted_tool_names(server: Server) -> None:
    from mcp import Client

    from inspect_swarm.server._mcp import build_mcp_server

    api = AsyncSwarmsClient(api_key=KEY, base_url=server.url, poll_interval=0.1)
    async with Client(build_mcp_server(api, "hosted")) as session:  # type: ignore[arg-type]
        assert {tool.name for tool in (await session.list_tools()).tools} == HOSTED
        run = _data(
            await session.call_tool(
                "start_swarm", {"command": "echo hosted", "count": 1, "size": "1x1", "wait": True}
            )
        )
        results = _data(await session.call_tool("get_swarm_results", {"swarm_id": run["id"]}))
        tails = [r["stdoutTail"] for r in results["results"]]  # type: ignore[attr-defined]
        assert tails == ["hosted\n"]
        listed = _data(await session.call_tool("list_swarms", {}))
        assert listed["swarms"][0]["id"] == run["id"]  # type: ignore[index]
    async with Client(build_mcp_server(api, "both")) as session:  # type: ignore[arg-type]
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == HOSTED | CLI
        # one implementation under both names: the same description and parameters
        assert tools["get_swarm"].description == tools["swarms_get"].description
        assert _schema(tools["start_swarm"]) == _schema(tools["swarms_run"]) is not None
        got = _data(await session.call_tool("get_swarm", {"swarm_id": run["id"]}))
        assert got == _data(await session.call_tool("swarms_get", {"swarm_id": run["id"]}))
    await api.aclose()


def test_tool_names_are_checked_and_chosen_on_the_command_line() -> None:
    from inspect_swarm.server._cli import build_parser
    from inspect_swarm.server._mcp import build_mcp_server

    api = AsyncSwarmsClient(api_key=KEY, base_url="http://127.0.0.1:9")
    with pytest.raises(
        ValueError, match="names: expected 'cli', 'hosted' or 'both', got 'maritime'"
    ):
        build_mcp_server(api, "maritime")  # type: ignore[arg-type]
    assert build_parser().parse_args(["mcp"]).names == "cli"
    assert build_parser().parse_args(["mcp", "--names", "hosted"]).names == "hosted"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["mcp", "--names", "maritime"])
