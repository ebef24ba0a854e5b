"""MCP tools for the Swarms API over stdio, under the CLI's names, the hosted server's, or both.

The CLI's own MCP server names every tool after its command (`swarms_run`, `swarms_list`,
`swarms_get`, `swarms_cancel`, `swarms_results`); the hosted Maritime MCP server has the same
calls as `start_swarm`, `list_swarms`, `get_swarm`, `cancel_swarm` and `get_swarm_results`.
Each call has one implementation, registered under the names asked for.

The server speaks MCP's JSON-RPC over stdio itself (the initialize handshake, `ping`,
`tools/list`, `tools/call` and cancellation), rather than through the `mcp` SDK, whose import
alone takes most of a second: an MCP client starts this command for every session, and it
answers within the CLI's start-up time. Clients that first probe the stateless protocol's
`server/discover` are told it is not offered, and fall back to the handshake.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TextIO

import anyio

from .._swarms_api import START_FIELDS, ApiField, input_schema
from ..client._client import AsyncSwarmsClient

ToolNames = Literal["cli", "hosted", "both"]

TOOL_NAMES: dict[str, tuple[str, str]] = {
    "run": ("swarms_run", "start_swarm"),
    "list": ("swarms_list", "list_swarms"),
    "get": ("swarms_get", "get_swarm"),
    "cancel": ("swarms_cancel", "cancel_swarm"),
    "results": ("swarms_results", "get_swarm_results"),
}
"""Each call's tool name in the CLI's MCP server and in the hosted one."""

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The MCP revisions this server speaks (all of them through the initialize handshake)."""

_INSTRUCTIONS = (
    "Run one shell command on many isolated sandboxes at once (a swarm run), follow it, and "
    "collect each sandbox's exit code, output tails and result."
)

# JSON-RPC's error codes
_PARSE_ERROR = -32700
_INVALID_REQUEST = -32600
_METHOD_NOT_FOUND = -32601
_INVALID_PARAMS = -32602


def _text(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_RUN_ID = {"swarm_id": _text("The run's id, or any unique start of one.")}

_WAIT = {
    "type": "boolean",
    "default": False,
    "description": "Return only once every sandbox has ended, with each sandbox's status, "
    "exit code, output tails and result; otherwise return the started run at once.",
}


def _argument(field: ApiField) -> str:
    """A start's field as the run tool names it: as on the wire, or by its short alias
    (`timeout`), as the hosted server's tool does."""
    return field.alias or field.wire


def _run_parameters() -> dict[str, dict[str, Any]]:
    """The run tool's parameters: every field of a start, and `wait`."""
    fields = {_argument(f): input_schema(f) for f in START_FIELDS.values()}
    return {**fields, "wait": _WAIT}


@dataclass(frozen=True)
class _Tool:
    description: str
    parameters: Mapping[str, dict[str, Any]]
    required: tuple[str, ...]
    call: Callable[..., Awaitable[dict[str, Any]]]

    def schema(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "description": self.description,
            "inputSchema": {
                "type": "object",
                "properties": dict(self.parameters),
                "required": list(self.required),
                "additionalProperties": False,
            },
        }


def _tools(client: AsyncSwarmsClient) -> dict[str, _Tool]:
    """One implementation of each call, keyed as `TOOL_NAMES`."""

    names = {_argument(field): name for name, field in START_FIELDS.items()}

    async def run(wait: bool = False, **arguments: Any) -> dict[str, Any]:
        options = {names[argument]: value for argument, value in arguments.items()}
        command = options.pop("command")
        started = await client.swarms.start(command, **options)
        return await client.swarms.wait(started["id"]) if wait else started

    async def list_runs() -> dict[str, Any]:
        return {"swarms": await client.swarms.list()}

    async def results(swarm_id: str) -> dict[str, Any]:
        return {"results": await client.swarms.results(swarm_id)}

    return {
        "run": _Tool(
            "Start a swarm run: one command on `count` sandboxes, or one sandbox per input. "
            "Give `count` or `inputs`, not both.",
            _run_parameters(),
            tuple(_argument(f) for f in START_FIELDS.values() if f.required and not f.group),
            run,
        ),
        "list": _Tool("Your swarm runs, newest first, with their progress.", {}, (), list_runs),
        "get": _Tool(
            "A swarm run with every sandbox's status, exit code, output tails and result.",
            _RUN_ID,
            ("swarm_id",),
            lambda swarm_id: client.swarms.get(swarm_id),
        ),
        "cancel": _Tool(
            "Cancel a swarm run: queued sandboxes never start, running ones stop; finished "
            "ones keep their results.",
            _RUN_ID,
            ("swarm_id",),
            lambda swarm_id: client.swarms.cancel(swarm_id),
        ),
        "results": _Tool(
            "Every sandbox's result record of a run, in index order.",
            _RUN_ID,
            ("swarm_id",),
            results,
        ),
    }


class McpServer:
    """The MCP server: answers JSON-RPC messages with the tools that call `client`."""

    def __init__(self, client: AsyncSwarmsClient, names: ToolNames = "cli") -> None:
        if names not in ("cli", "hosted", "both"):
            raise ValueError(f"names: expected 'cli', 'hosted' or 'both', got {names!r}")
        wanted = {"cli": (0,), "hosted": (1,), "both": (0, 1)}[names]
        self.tools = {
            TOOL_NAMES[call][which]: tool
            for call, tool in _tools(client).items()
            for which in wanted
        }

    async def answer(self, message: Any) -> dict[str, Any] | None:
        """The response to one JSON-RPC message (None for a notification)."""
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return _error(None, _INVALID_REQUEST, "not a JSON-RPC request")
        if "id" not in message:
            return None  # notifications: initialized, cancelled (handled by `serve`)
        request_id = message["id"]
        params = message.get("params") or {}
        method = message["method"]
        if method == "initialize":
            return _result(request_id, _initialized(params))
        if method == "ping":
            return _result(request_id, {})
        if method == "tools/list":
            return _result(request_id, {"tools": [t.schema(n) for n, t in self.tools.items()]})
        if method == "tools/call":
            return await self._call(request_id, params)
        return _error(request_id, _METHOD_NOT_FOUND, f"method not found: {method}")

    async def _call(self, request_id: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(params.get("name", ""))
        if tool is None:
            known = ", ".join(self.tools)
            return _error(
                request_id, _INVALID_PARAMS, f"unknown tool {params.get('name')!r}: have {known}"
            )
        arguments = params.get("arguments") or {}
        unknown = sorted(set(arguments) - set(tool.parameters))
        missing = [name for name in tool.required if name not in arguments]
        if unknown or missing:
            problem = f"unknown arguments {unknown}" if unknown else f"missing {missing}"
            return _result(request_id, _failed(f"{params['name']}: {problem}"))
        try:
            data = await tool.call(**arguments)
        except Exception as ex:
            # the API's refusal, or arguments of the wrong type: the model is told, and the
            # server goes on
            return _result(request_id, _failed(f"{params['name']}: {ex}"))
        content = [{"type": "text", "text": json.dumps(data)}]
        return _result(request_id, {"content": content, "structuredContent": data})

    async def serve(self, reader: Any, stream: TextIO) -> None:
        """Answer the messages `reader` yields, a JSON line each, on `stream`, until it ends;
        each request in a task of its own, so a long `wait` leaves the others answered."""
        running: dict[Any, anyio.CancelScope] = {}

        async def respond(message: Any) -> None:
            request_id = message.get("id") if isinstance(message, dict) else None
            with anyio.CancelScope() as scope:
                running[request_id] = scope
                response = await self.answer(message)
                if response is not None:
                    stream.write(json.dumps(response) + "\n")
                    stream.flush()
            running.pop(request_id, None)

        async with anyio.create_task_group() as tg:
            async for line in reader:
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    stream.write(json.dumps(_error(None, _PARSE_ERROR, "not JSON")) + "\n")
                    stream.flush()
                    continue
                if isinstance(message, dict) and message.get("method") == (
                    "notifications/cancelled"
                ):
                    cancelled = (message.get("params") or {}).get("requestId")
                    if cancelled in running:
                        running[cancelled].cancel()
                    continue
                tg.start_soon(respond, message)
            # stdin closed: the client is done, and stops this process if it will not wait
            # for the answers still due


def _initialized(params: Mapping[str, Any]) -> dict[str, Any]:
    from importlib.metadata import version

    asked = params.get("protocolVersion")
    return {
        "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "inspect-swarm", "version": version("inspect_swarm")},
        "instructions": _INSTRUCTIONS,
    }


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _failed(message: str) -> dict[str, Any]:
    """A tool call that failed: told to the model as the call's result."""
    return {"content": [{"type": "text", "text": message}], "isError": True}


def serve_mcp(
    api_key: str | None = None, base_url: str | None = None, names: ToolNames = "cli"
) -> None:
    """Serve the tools over stdio until the client closes stdin."""

    async def main() -> None:
        async with AsyncSwarmsClient(api_key=api_key, base_url=base_url) as client:
            server = McpServer(client, names)
            await server.serve(anyio.wrap_file(sys.stdin), sys.stdout)

    anyio.run(main)
