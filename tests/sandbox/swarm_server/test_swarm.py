"""Swarms whose members each have a sandbox on the swarm server (the swarm_server provider)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai import Task, eval, eval_async
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.event import ToolEvent
from inspect_ai.log import EvalSample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import TaskState
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

from inspect_swarm import leaderless, member, swarm
from inspect_swarm.sandbox import SwarmServerConfig, SwarmServerSandboxEnvironment
from inspect_swarm.scripted import scripted_model

from ...e2b_servers import live_sandboxes
from ...servers import Server

EXAMPLES = Path(__file__).parents[3] / "examples"
MEMBERS = ("agent-1", "agent-2", "agent-3")


def bash_call(command: str) -> dict[str, Any]:
    return {"tool": "bash", "arguments": {"command": command}}


@scorer(metrics=[accuracy()])
def every_member_left_its_note() -> Scorer:
    """Read each member's own sandbox: its note is there, and nobody else's."""

    async def score(state: TaskState, target: Target) -> Score:
        record: dict[str, Any] = state.store.get("inspect_swarm:result")
        seen = {}
        for m in record["members"]:
            env = sandbox(m["sandbox"])
            listing = await env.exec(["sh", "-c", "ls note-* 2>/dev/null"])
            seen[m["name"]] = {
                "files": listing.stdout.split(),
                "note": await env.read_file(f"note-{m['name']}.txt"),
                "id": env.as_type(SwarmServerSandboxEnvironment).sandbox_id,
            }
        ok = all(v["files"] == [f"note-{k}.txt"] and v["note"] == f"{k}\n" for k, v in seen.items())
        return Score(value=CORRECT if ok else INCORRECT, metadata=seen)

    return score


def member_task(config: SwarmServerConfig) -> Task:
    return Task(
        dataset=[Sample(input="Leave a note.", target="ok")],
        solver=swarm(
            member(react, {"tools": [bash()]}, name="agent", count=3, sandbox="{member}"),
            controller=leaderless(stop_on_submission=False),
            channels=[],
        ),
        scorer=every_member_left_its_note(),
        sandbox=("swarm_server", config.model_copy(update={"services": MEMBERS})),
    )


SCRIPT = {
    "*": [
        bash_call('echo "$(hostname)" > /tmp/host; n=$(ls /home/user | wc -l); echo seen=$n'),
        bash_call("ls note-* 2>/dev/null | wc -l"),
        {"submit": "ok"},
    ],
    **{
        name: [
            bash_call(f"echo {name} > note-{name}.txt"),
            {"text": "waiting", "delay": 0.3},
            bash_call("ls note-* | wc -l"),
            {"submit": "ok"},
        ]
        for name in MEMBERS
    },
}


def tool_results(sample: EvalSample) -> list[str]:
    return [str(e.result) for e in sample.events if isinstance(e, ToolEvent)]


def test_three_members_with_sandboxes_of_their_own(
    backend: str, server: Server, provider_config: SwarmServerConfig, tmp_path: Path
) -> None:
    [log] = eval(
        member_task(provider_config),
        model=scripted_model({"members": SCRIPT}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples
    sample = log.samples[0]
    assert sample.scores is not None
    score = sample.scores["every_member_left_its_note"]
    assert score.value == CORRECT, score.metadata
    # each member counted only its own note, after every member had written one
    assert tool_results(sample).count("1\n") == 3
    assert len({v["id"] for v in score.metadata.values()}) == 3
    assert live_sandboxes(server) == []


def test_a_cancelled_eval_leaves_no_sandbox(
    backend: str, server: Server, provider_config: SwarmServerConfig, tmp_path: Path
) -> None:
    script = {"*": [bash_call("sleep 60"), {"submit": "ok"}]}

    async def main() -> None:
        with anyio.move_on_after(4):
            await eval_async(
                member_task(provider_config),
                model=scripted_model({"members": script}),
                log_dir=str(tmp_path),
            )

    anyio.run(main, backend=backend)
    assert live_sandboxes(server) == []


def test_shared_sandbox_runs_on_the_swarm_server(
    backend: str, e2b_env: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    module = importlib.import_module("shared_sandbox")
    [log] = eval(
        module.shared_sandbox(),
        model=scripted_model(EXAMPLES / "shared_sandbox.yaml", name="demo"),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples
    sample = log.samples[0]
    record = sample.store["inspect_swarm:result"]
    assert [m["status"] for m in record["members"]] == ["submitted"] * 3
    # the readers found react-1's note in /shared/notes.md, which the sample's files made
    checks = [r for r in tool_results(sample) if "react-1: wrote /shared/solution.sh" in r]
    assert len(checks) == 2 and all(r.endswith("9\n") for r in checks)
    assert sample.scores is not None
    assert sample.scores["script_works"].value == CORRECT
    assert live_sandboxes(e2b_env) == []
