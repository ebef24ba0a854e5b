"""A bridged member whose CLI runs in the sandbox and calls the model through Inspect's real
`sandbox_agent_bridge()`: its proxy runs in the sandbox (the `multidir` provider, processes on
this machine) with the sandbox tools that ship with inspect_ai, so nothing needs a network."""

import fcntl
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.agent import Agent, AgentState, agent, react, sandbox_agent_bridge
from inspect_ai.event import ModelEvent
from inspect_ai.log import EvalSample
from inspect_ai.util import sandbox, token_limit

from inspect_swarm import Budget, Member, member, swarm
from inspect_swarm.sandbox import multidir

from ..runtime.helpers import ALL_RUN, ledger_member, metrics_member, run, statuses
from .test_bridged import assert_sample_went_on

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the sandbox tools inspect_ai ships are Linux executables"
)


@pytest.fixture(autouse=True)
def one_bridge_at_a_time() -> Iterator[None]:
    """One of these tests at a time across test workers: inspect installs its sandbox tools
    on this host once per process, and two first installs at once write the same directory."""
    with (Path(tempfile.gettempdir()) / "inspect-swarm-sandbox-tools.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# A CLI agent: it talks to the model "inspect" with the OpenAI chat completions API at
# OPENAI_BASE_URL, waiting for the bridge's proxy to listen (it starts in the background),
# and prints the last reply.
CLI = """
import json, os, sys, time, urllib.error, urllib.request

def complete(messages):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": "inspect", "messages": messages}).encode(),
        headers={"Content-Type": "application/json"},
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(request) as response:
                return json.load(response)["choices"][0]["message"]["content"]
        except urllib.error.URLError as ex:
            if not isinstance(ex.reason, ConnectionRefusedError):
                raise
            time.sleep(0.1)
    sys.exit("the bridge's proxy never listened")

messages, reply = [{"role": "user", "content": "work"}], ""
for _ in range(int(sys.argv[1])):
    reply = complete(messages)
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "go on"}]
print(reply)
"""

STEP = 110  # tokens of each scripted call: 100 input + 10 output, $0.002


def free_port() -> int:
    # the proxy listens on this machine, where other evals may run bridges at the same time
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@agent
def sandbox_cli(calls: int = 20) -> Agent:
    """Run the CLI in the sandbox, `calls` model calls through the sandbox agent bridge."""

    async def execute(state: AgentState) -> AgentState:
        port = free_port()
        async with sandbox_agent_bridge(state, port=port) as bridge:
            await sandbox().write_file("cli.py", CLI)
            # the multidir sandbox runs host processes, so this interpreter is there
            result = await sandbox().exec(
                [sys.executable, "cli.py", str(calls)],
                env={"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"},
            )
            if not result.success:
                raise RuntimeError(f"the CLI failed: {result.stderr}")
        return bridge.state

    return execute


def run_cli(
    tmp_path: Path, *members: Member, steps: list[Any], budget: Budget | None = None
) -> EvalSample:
    return run(
        swarm(list(members), controller=ALL_RUN, channels=[], budget=budget or Budget()),
        {"cli": steps, "native": [{"text": "x", "delay": 0.3}, {"submit": "42"}]},
        tmp_path,
        task_args={"sandbox": multidir()},
    )


def bridged_calls(sample: EvalSample) -> list[ModelEvent]:
    # a call through the bridge names the model its client asked for
    return [
        e for e in sample.events if isinstance(e, ModelEvent) and e.requested_model == "inspect"
    ]


def test_the_clis_calls_are_metered_as_the_members(backend: str, tmp_path: Path) -> None:
    sample = run_cli(
        tmp_path,
        member(sandbox_cli, {"calls": 2}, name="cli", bridged=True),
        steps=[{"text": "thinking"}, {"text": "42"}],
    )
    assert sample.error is None
    assert statuses(sample) == {"cli": "submitted"}
    assert sample.output.completion == "42"
    assert len(bridged_calls(sample)) == 2
    cli = ledger_member(sample, "cli")
    assert cli["bridged"] and not cli["cancelled"]
    assert cli["calls"]["calls"] == 2
    assert cli["meter"]["usage"]["total_tokens"] == 2 * STEP
    assert cli["meter"]["cost"] == pytest.approx(0.004)
    ledger = sample.store["inspect_swarm:ledger"]
    assert ledger["unattributed"]["total_tokens"] == 0 and ledger["attribution_complete"]
    metrics = metrics_member(sample, "cli")
    assert (metrics["tokens"], metrics["steps"]) == (2 * STEP, 2)
    assert metrics["delivery_effective"] == "poll"
    # the CLI's own tool calls emit no ToolEvents
    assert metrics["longest_identical_tool_run"] is None


def test_a_cli_that_exits_without_a_call_has_submitted(tmp_path: Path) -> None:
    # the bridge saw no traffic, so the agent returns an output with no choices
    sample = run_cli(
        tmp_path, member(sandbox_cli, {"calls": 0}, name="cli", bridged=True), steps=[]
    )
    assert sample.error is None
    assert statuses(sample) == {"cli": "submitted"}
    assert sample.output.completion == ""
    assert ledger_member(sample, "cli")["calls"]["calls"] == 0


def test_its_own_limit_cancels_it_without_ending_the_sample(backend: str, tmp_path: Path) -> None:
    sample = run_cli(
        tmp_path,
        member(sandbox_cli, name="cli", bridged=True, limits=[token_limit(150)]),
        member(react, name="native"),
        steps=[{"text": "ok"}] * 10,
    )
    assert_sample_went_on(sample)
    assert statuses(sample) == {"cli": "member_limit:token", "native": "submitted"}
    cli = ledger_member(sample, "cli")
    assert cli["cancelled"]
    # cancelled at once: no call after the one that went past 150 tokens
    assert cli["calls"]["calls"] == 2 and len(bridged_calls(sample)) == 2
    assert sample.output.completion == "42"


def test_the_swarms_cap_cancels_it(backend: str, tmp_path: Path) -> None:
    sample = run_cli(
        tmp_path,
        member(sandbox_cli, name="cli", bridged=True),
        steps=[{"text": "ok"}] * 10,
        budget=Budget(tokens=150),
    )
    assert_sample_went_on(sample)
    assert statuses(sample) == {"cli": "swarm_cap"}
    cli = ledger_member(sample, "cli")
    # cancelled at once: no call after the one that reached the cap
    assert cli["cancelled"] and cli["calls"]["calls"] == 2 and len(bridged_calls(sample)) == 2
    ledger = sample.store["inspect_swarm:ledger"]
    assert ledger["stop_reason"] == "swarm_cap"
    assert not ledger["total_complete"]
