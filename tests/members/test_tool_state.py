from pathlib import Path
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.event import ToolEvent
from inspect_ai.log import EvalSample
from inspect_ai.solver import Generate, Solver, TaskState, chain, solver
from inspect_ai.tool import Tool, memory

from inspect_swarm import member, swarm
from inspect_swarm.scripted import scripted_model

from ..runtime.helpers import ALL_RUN

WRITE = {
    "tool": "memory",
    "arguments": {"command": "create", "path": "/memories/a.md", "file_text": "alpha"},
}
VIEW = {"tool": "memory", "arguments": {"command": "view", "path": "/memories"}}
SCRIPT = {
    "a": [WRITE, {"submit": "42"}],
    "b": [{"text": "waiting", "delay": 0.3}, VIEW, {"submit": "42"}],
}


@solver
def setup_memory() -> Solver:
    """Prepares memory at the default instance, before the swarm runs."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await memory()(command="create", path="/memories/setup.md", file_text="from setup")
        return state

    return solve


def run_memory(tool: Tool, tmp_path: Path, setup: bool = False) -> EvalSample:
    members = swarm(
        [member(react, {"tools": [tool]}, name="a"), member(react, {"tools": [tool]}, name="b")],
        controller=ALL_RUN,
        channels=[],
    )
    [log] = eval(
        Task(
            dataset=[Sample(input="x", target="42")],
            solver=chain(setup_memory(), members) if setup else members,
        ),
        model=scripted_model({"members": SCRIPT}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples
    return log.samples[0]


def b_view(sample: EvalSample) -> str:
    [view] = [
        e
        for e in sample.events
        if isinstance(e, ToolEvent) and e.arguments.get("command") == "view"
    ]
    return str(view.result)


def files(sample: EvalSample, key: str) -> Any:
    return sample.store.get(key)


def test_default_tool_state_is_private_to_each_member(backend: str, tmp_path: Path) -> None:
    sample = run_memory(memory(), tmp_path)
    assert "a.md" not in b_view(sample)
    assert list(files(sample, "MemoryStore:@a:files")) == ["/memories/a.md"]
    assert "/memories/a.md" not in (files(sample, "MemoryStore:@b:files") or {})


def test_an_explicit_instance_is_shared(tmp_path: Path) -> None:
    sample = run_memory(memory(instance="board"), tmp_path)
    assert "a.md" in b_view(sample)
    assert list(files(sample, "MemoryStore:board:files")) == ["/memories/a.md"]


def test_setup_state_at_the_default_instance_is_not_visible(tmp_path: Path) -> None:
    sample = run_memory(memory(), tmp_path, setup=True)
    assert "/memories/setup.md" in files(sample, "MemoryStore:files")
    assert "setup.md" not in b_view(sample)
