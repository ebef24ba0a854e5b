"""A bridged member on the swarm's channels: a CLI in the sandbox reaches the messages, the task
list and the board as host tools of Inspect's real `sandbox_agent_bridge()` (an MCP server its
proxy serves), and acts as the member, beside a native one."""

import sys
from pathlib import Path

import pytest
from inspect_ai.agent import Agent, AgentState, agent, sandbox_agent_bridge
from inspect_ai.event import ToolEvent
from inspect_ai.log import resolve_sample_attachments
from inspect_ai.tool import ToolDef
from inspect_ai.util import sandbox

from inspect_swarm import (
    member,
    messages,
    shared_memory,
    swarm,
    swarm_bridged_tools,
    tasks,
)
from inspect_swarm.sandbox import multidir

from ..channels.members import WAIT, board_member, comm
from ..channels.members import tool as call
from ..runtime.helpers import ALL_RUN, infos, metrics_member, run, statuses
from .agents import cli_agent
from .test_sandbox_bridge import free_port
from .test_sandbox_bridge import one_bridge_at_a_time as one_bridge_at_a_time

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the sandbox tools inspect_ai ships are Linux executables"
)

# A CLI agent with MCP tools: it lists the host tools the bridge serves, declares them to the
# model "inspect" with the OpenAI chat completions API, calls each tool the model calls over
# MCP, and prints the model's last text.
CLI = r"""
import json, os, sys, time, urllib.error, urllib.request

BASE = os.environ["BRIDGE"]

def post(path, body):
    request = urllib.request.Request(
        BASE + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(request) as response:
                return json.load(response)
        except urllib.error.URLError as ex:
            if not isinstance(ex.reason, ConnectionRefusedError):
                raise
            time.sleep(0.1)
    sys.exit("the bridge's proxy never listened")

def mcp(method, params):
    return post("/mcp/swarm", {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})

listed = mcp("tools/list", {})["result"]["tools"]
declared = [
    {"type": "function", "function": {
        "name": t["name"], "description": t["description"], "parameters": t["inputSchema"]}}
    for t in listed
]
messages = [{"role": "user", "content": "work"}]
for _ in range(20):
    reply = post("/v1/chat/completions", {"model": "inspect", "messages": messages, "tools": declared})
    message = reply["choices"][0]["message"]
    messages.append(message)
    if not message.get("tool_calls"):
        print(message["content"])
        break
    for call in message["tool_calls"]:
        answer = mcp("tools/call", {
            "name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])})
        text = (
            answer["result"]["content"][0]["text"] if "result" in answer
            else "ERROR: " + answer["error"]["message"]
        )
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
"""


@agent
def mcp_cli() -> Agent:
    """A CLI in the sandbox that uses the swarm's channels through the bridge's host tools."""
    host_tools = swarm_bridged_tools()  # resolved as the member starts

    async def execute(state: AgentState) -> AgentState:
        port = free_port()
        async with sandbox_agent_bridge(state, port=port, bridged_tools=[host_tools]) as bridge:
            await sandbox().write_file("cli.py", CLI)
            # the multidir sandbox runs host processes, so this interpreter is there
            result = await sandbox().exec(
                [sys.executable, "cli.py"], env={"BRIDGE": f"http://127.0.0.1:{port}"}
            )
            if not result.success:
                raise RuntimeError(f"the CLI failed: {result.stderr}")
        return bridge.state

    return execute


def test_a_bridged_member_takes_part_in_messages_tasks_and_the_board(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            [member(mcp_cli, name="cli", bridged=True), member(board_member, name="native")],
            controller=ALL_RUN,
            channels=[messages(), tasks(), shared_memory()],
        ),
        {
            "native": [
                call("tasks", command="create", title="count the primes", assignee="cli"),
                call("messages", command="send", to="cli", text="Please take t-1."),
                WAIT,
                call("messages", command="read"),
                {"submit": "25"},
            ],
            "cli": [
                call("messages", command="read"),
                call("messages", command="send", reply_to="m-1", text="On it: 25."),
                call("tasks", command="claim", task="t-1"),
                call("tasks", command="update", task="t-1", version=2, status="done", result="25"),
                "25",
            ],
        },
        tmp_path,
        task_args={"sandbox": multidir()},
    )
    assert sample.error is None
    assert statuses(sample) == {"cli": "submitted", "native": "submitted"}
    assert sample.output.completion == "25"
    # each host tool call ran once, as the model proposed it, recorded as a tool event
    bridged = [
        e for e in sample.events if isinstance(e, ToolEvent) and (e.metadata or {}).get("bridge")
    ]
    assert [(e.function, e.error) for e in bridged] == [
        ("messages", None),
        ("messages", None),
        ("tasks", None),
        ("tasks", None),
    ]
    assert "Please take t-1." in str(bridged[0].result)
    # the records are the member's, from its own loop
    cli_comm = [e.data for e in comm(sample) if e.data["member"] == "cli"]  # type: ignore[index]
    assert {(d["kind"], d["channel"]) for d in cli_comm} == {  # type: ignore[index]
        ("read", "messages"),
        ("sent", "tasks"),
        ("delivered", "tasks"),
        ("sent", "messages"),
        ("delivered", "messages"),
    }
    assert all(d["nested"] is False for d in cli_comm)  # type: ignore[index]
    done = [e.data for e in comm(sample, "delivered") if e.data["channel"] == "tasks"]  # type: ignore[index]
    assert [(d["task"], d["status"], d["claimant"]) for d in done][-1] == ("t-1", "done", "cli")  # type: ignore[index]
    [native_read] = [
        e for e in sample.events
        if isinstance(e, ToolEvent) and e.function == "messages"
        and e.arguments["command"] == "read" and not (e.metadata or {}).get("bridge")
    ]  # fmt: skip
    assert 'from="cli"' in str(native_read.result) and "On it: 25." in str(native_read.result)
    cli = metrics_member(sample, "cli")
    assert cli["delivery_effective"] == "poll"
    assert {c: v["records"] for c, v in cli["comm"].items()} == {
        "messages": 1,
        "tasks": 2,
        "shared_memory": 0,
    }
    assert sum(v["notices"] for v in cli["comm"].values()) == 0
    metrics = sample.store["inspect_swarm:metrics"]
    assert (metrics["tools_unwired"], metrics["notify_unwired"]) == ([], [])


def test_a_bridged_member_without_the_host_tools_is_reported(tmp_path: Path) -> None:
    sample = run(
        swarm(
            [member(cli_agent, {"calls": 2}, name="cli", bridged=True)],
            controller=ALL_RUN,
            channels=[messages()],
        ),
        {"cli": [{"text": "thinking"}, {"text": "42"}]},
        tmp_path,
    )
    assert sample.store["inspect_swarm:metrics"]["tools_unwired"] == ["cli"]
    [wiring] = infos(resolve_sample_attachments(sample), "wiring")
    assert "pass bridged_tools=[swarm_bridged_tools()]" in wiring["fix"]


def test_outside_a_swarm_the_server_has_no_tools() -> None:
    spec = swarm_bridged_tools("channels")
    assert (spec.name, list(spec.tools)) == ("channels", [])


def test_the_host_tools_are_the_members_tools() -> None:
    # the same tools swarm_tools() gives a native member's own loop: each channel's and the wait
    from ..channels.helpers import FakeHost, acting

    host = FakeHost(["a", "b"], [messages(), tasks()])
    with acting("a"):
        spec = swarm_bridged_tools()
    assert [ToolDef(t).name for t in spec.tools] == ["messages", "tasks", "swarm_wait"]
    # distinct descriptions, so the bridge can tell which tool a proposed call denotes
    assert len({ToolDef(t).description for t in spec.tools}) == 3
    assert host.bus_.own_loop("a") == "loop-a"
