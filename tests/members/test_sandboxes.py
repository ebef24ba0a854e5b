import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai.agent import Agent, AgentState, agent, as_solver, react
from inspect_ai.dataset import Sample
from inspect_ai.event import ModelEvent, ToolEvent
from inspect_ai.log import EvalSample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import TaskState, chain
from inspect_ai.tool import Tool, bash, tool
from inspect_ai.tool._sandbox_tools_utils import sandbox as sandbox_tools
from inspect_ai.tool._sandbox_tools_utils.sandbox import sandbox_with_injected_tools
from inspect_ai.util import SandboxEnvironment, SandboxEnvironmentSpec, sandbox

from inspect_swarm import filesystem, member, shared_memory, swarm
from inspect_swarm.sandbox import (
    MultidirSandboxEnvironment,
    SwarmServerSandboxEnvironment,
    multidir,
)
from inspect_swarm.scripted import scripted_model

from ..runtime.helpers import ALL_RUN, statuses

Provider = Callable[..., SandboxEnvironmentSpec]
"""Makes the sample's sandbox spec from environment names (`multidir`, `swarm_server`)."""


@pytest.fixture
def provider() -> Provider:
    """The provider these tests run on; tests/sandbox/swarm_server runs them on `swarm_server` too."""
    return multidir


def env_name(env: SandboxEnvironment) -> str:
    """The environment's name, on either provider (`sandbox()` gives a proxy)."""
    try:
        return env.as_type(SwarmServerSandboxEnvironment).name
    except TypeError:
        return env.as_type(MultidirSandboxEnvironment).name


@tool
def environments() -> Tool:
    async def execute() -> str:
        """List the sandbox environments this tool can reach, and the default's name."""
        try:
            sandbox("no-such-environment")
        except ValueError as ex:
            # inspect names the environments it knows in the error
            listed = str(ex).split("Available environments: ")[1].rstrip(".")
        return f"{listed}; default={env_name(sandbox())}"

    return execute


@tool
def injected() -> Tool:
    async def execute() -> str:
        """Name the environment a tool that injects the sandbox tools without a name gets."""
        return env_name(await sandbox_with_injected_tools())

    return execute


@scorer(metrics=[accuracy()])
def tests_pass() -> Scorer:
    """Run the task's tests in each member's sandbox."""

    async def score(state: TaskState, target: Target) -> Score:
        # the swarm's result record; task code reads it but never writes it
        record: dict[str, Any] = state.store.get("inspect_swarm:result")
        passed = [
            m["name"]
            for m in record["members"]
            if (await sandbox(m["sandbox"]).exec(["sh", "/tests/run.sh"])).success
        ]
        return Score(value=CORRECT if passed else INCORRECT, metadata={"passed": passed})

    return score


def run_envs(
    solver: Any,
    script: dict[str, Any],
    tmp_path: Path,
    envs: tuple[str, ...],
    provider: Provider,
    scorer: Scorer | None = None,
) -> EvalSample:
    [log] = eval(
        Task(
            dataset=[Sample(input="Leave 42 in answer.txt.", target="42")],
            solver=solver,
            scorer=scorer,
            sandbox=provider(*envs),
        ),
        model=scripted_model({"members": script}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples
    return log.samples[0]


def tool_results(sample: EvalSample, function: str) -> dict[str, str]:
    """The result of each member's call of `function`, by member (its lane's span)."""
    spans = {m["name"]: m for m in sample.store["inspect_swarm:result"]["members"]}
    names = {e.id: e.name for e in sample.events if e.event == "span_begin" and e.name in spans}
    return {
        names[e.span_id]: str(e.result)
        for e in sample.events
        if isinstance(e, ToolEvent) and e.function == function and e.span_id in names
    }


def bash_call(command: str) -> dict[str, Any]:
    return {"tool": "bash", "arguments": {"command": command}}


AGENTS = member(
    react,
    {"tools": [bash(), environments()]},
    name="agent",
    count=2,
    sandbox="{member}",
    visible_sandboxes=["comparator"],
)


def test_a_member_sees_only_its_own_sandbox_and_its_services(
    backend: str, tmp_path: Path, provider: Provider
) -> None:
    sample = run_envs(
        swarm(AGENTS, controller=ALL_RUN, channels=[]),
        {"*": [{"tool": "environments"}, {"submit": "42"}]},
        tmp_path,
        ("default", "agent-1", "agent-2", "comparator"),
        provider,
    )
    assert tool_results(sample, "environments") == {
        "agent-1": "agent-1, comparator; default=agent-1",
        "agent-2": "agent-2, comparator; default=agent-2",
    }
    members = sample.store["inspect_swarm:result"]["members"]
    assert [(m["name"], m["sandbox"]) for m in members] == [
        ("agent-1", "agent-1"),
        ("agent-2", "agent-2"),
    ]


def test_a_members_files_are_its_own(backend: str, tmp_path: Path, provider: Provider) -> None:
    sample = run_envs(
        swarm(AGENTS, controller=ALL_RUN, channels=[]),
        {
            "agent-1": [bash_call("echo mine > note.txt"), {"submit": "42"}],
            "agent-2": [
                {"text": "waiting", "delay": 0.3},
                bash_call("cat note.txt || echo missing"),
                {"submit": "42"},
            ],
        },
        tmp_path,
        ("default", "agent-1", "agent-2", "comparator"),
        provider,
    )
    assert "missing" in tool_results(sample, "bash")["agent-2"]
    assert sample.error is None


@pytest.fixture
def tests_script() -> Iterator[None]:
    # the spec's scorer runs /tests/run.sh, an absolute path: on multidir, a host path
    script = Path("/tests/run.sh")
    created_dir = not script.parent.exists()
    if script.exists():
        pytest.skip("/tests/run.sh exists on this machine; not overwriting it")
    script.parent.mkdir(exist_ok=True)
    script.write_text("grep -qx 42 answer.txt\n")
    try:
        yield
    finally:
        script.unlink()
        if created_dir:
            script.parent.rmdir()


@pytest.mark.usefixtures("tests_script")
def test_the_spec_tests_pass_scorer_grades_each_members_sandbox(
    tmp_path: Path, provider: Provider
) -> None:
    sample = run_envs(
        swarm(
            member(react, {"tools": [bash()]}, name="agent", count=2, sandbox="{member}"),
            controller=ALL_RUN,
            channels=[],
        ),
        {
            "agent-1": [bash_call("echo 41 > answer.txt"), {"submit": "41"}],
            "agent-2": [bash_call("echo 42 > answer.txt"), {"submit": "42"}],
        },
        tmp_path,
        ("default", "agent-1", "agent-2"),
        provider,
        scorer=tests_pass(),
    )
    assert sample.scores is not None
    score = sample.scores["tests_pass"]
    assert score.value == CORRECT
    assert score.metadata == {"passed": ["agent-2"]}


def test_the_preamble_says_the_member_has_its_own_sandbox(
    tmp_path: Path, provider: Provider
) -> None:
    sample = run_envs(
        swarm(member(react, name="agent", count=2, sandbox="{member}"), channels=[]),
        {"*": [{"submit": "42"}]},
        tmp_path,
        ("agent-1", "agent-2"),
        provider,
    )
    inputs = [
        sample.attachments.get(text.removeprefix("attachment://"), text)
        for e in sample.events
        if isinstance(e, ModelEvent)
        for text in [str(e.input[-1].content)]
    ]
    assert len(inputs) == 2
    assert all("You work in a sandbox of your own" in text for text in inputs)


@agent
def inject_into_service() -> Agent:
    """Gives the comparator the sandbox tools, as a bridge or MCP server named for it would."""

    async def execute(state: AgentState) -> AgentState:
        await sandbox_with_injected_tools(sandbox_name="comparator")
        return state

    return execute


@pytest.fixture
def per_environment_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sandbox tools installed per environment, as in containers (multidir environments
    share the host's tools directory, so each would see the others' install)."""
    installed: set[str] = set()

    async def detect(env: SandboxEnvironment) -> bool:
        return env.as_type(MultidirSandboxEnvironment).name in installed

    async def inject(env: SandboxEnvironment) -> None:
        installed.add(env.as_type(MultidirSandboxEnvironment).name)

    monkeypatch.setattr(sandbox_tools, "_sandbox_tools_installed", detect)
    monkeypatch.setattr(sandbox_tools, "_inject_container_tools_code", inject)


@pytest.mark.usefixtures("per_environment_tools")
def test_injecting_tools_pick_the_members_own_sandbox(tmp_path: Path) -> None:
    [log] = eval(
        Task(
            dataset=[Sample(input="x", target="42")],
            # the service has the sandbox tools before any member starts
            solver=chain(
                as_solver(inject_into_service()),
                swarm(
                    member(
                        react,
                        {"tools": [injected()]},
                        name="agent",
                        sandbox="{member}",
                        visible_sandboxes=["comparator"],
                    ),
                    channels=[],
                ),
            ),
            sandbox=multidir("default", "agent", "comparator"),
        ),
        model=scripted_model({"members": {"*": [{"tool": "injected"}, {"submit": "42"}]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples
    sample = log.samples[0]
    assert sample.error is None
    assert tool_results(sample, "injected") == {"agent": "agent"}


def test_environments_are_checked_when_the_swarm_starts(tmp_path: Path, provider: Provider) -> None:
    [log] = eval(
        Task(
            dataset=[Sample(input="x")],
            solver=swarm(AGENTS, channels=[]),
            sandbox=provider("default", "agent-1"),
        ),
        model=scripted_model({"members": {"*": [{"submit": "42"}]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples
    sample = log.samples[0]
    assert sample.error is not None
    assert "no sandbox environments named ['agent-2', 'comparator']" in sample.error.message
    assert statuses(sample) == {"agent-1": None, "agent-2": None}


@pytest.mark.parametrize(
    ("members", "channels", "message"),
    [
        (
            [member(react, name="a", sandbox="a"), member(react, name="b")],
            [],
            r"members \['b'\] share the sample's sandbox while others have their own",
        ),
        (
            [member(react, name="a", sandbox="box"), member(react, name="b", sandbox="box")],
            [],
            r"sandbox environments \['box'\] are given to more than one member",
        ),
        (
            [
                member(react, name="a", sandbox="{member}", visible_sandboxes=["b"]),
                member(react, name="b", sandbox="{member}"),
            ],
            [],
            r"member 'a': visible_sandboxes names \['b'\], another member's own sandbox",
        ),
        (
            [member(react, name="a", sandbox="{member}")],
            ["filesystem"],
            "the filesystem channel describes a shared sandbox",
        ),
        (
            [member(react, name="a")],
            [filesystem(shared_volume=True)],
            r"filesystem\(shared_volume=True\) is for members with their own sandboxes",
        ),
    ],
)
def test_sandbox_refusals(members: list[Any], channels: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        swarm(members, channels=channels)


def test_per_member_sandboxes_accept_a_board_or_a_shared_volume() -> None:
    swarm(member(react, name="a", count=2, sandbox="{member}"), channels=[shared_memory()])
    swarm(
        member(react, name="a", count=2, sandbox="{member}"),
        channels=[filesystem(shared_volume=True)],
    )


def test_visible_sandboxes_need_a_sandbox() -> None:
    with pytest.raises(ValueError, match=r"visible_sandboxes=\['svc'\] needs sandbox="):
        member(react, visible_sandboxes=["svc"])
    with pytest.raises(ValueError, match="'default' cannot be listed"):
        member(react, sandbox="{member}", visible_sandboxes=["default"])


FRESH_MACHINE = """
import json
from inspect_ai import Task, eval
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_swarm import leaderless, member, swarm
from inspect_swarm.sandbox import multidir
from inspect_swarm.scripted import scripted_model

names = [f"agent-{i}" for i in range(1, 5)]
members = member(react, name="agent", count=4, sandbox="{member}", visible_sandboxes=["svc"])
task = Task(
    dataset=[Sample(input="x")],
    solver=swarm(members, controller=leaderless(stop_on_submission=False), channels=[]),
    sandbox=multidir(*names, "svc"),
)
[log] = eval(task, model=scripted_model([{"submit": "42"}]), log_dir=LOG_DIR, display="none")
print(json.dumps([m["status"] for m in log.samples[0].store["inspect_swarm:result"]["members"]]))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a private /var/tmp (a machine without Inspect's sandbox tools) needs root and unshare",
)
def test_members_install_the_sandbox_tools_of_a_new_machine_one_at_a_time(
    backend: str, tmp_path: Path
) -> None:
    # Inspect installs the sandbox tools of local sandboxes once per machine, in /var/tmp;
    # members that see a service inject them as they start, and must not install them over
    # each other ("Text file busy"). A private, empty /var/tmp stands for a new machine.
    code = f"LOG_DIR = {str(tmp_path)!r}\n{FRESH_MACHINE}"
    fresh = 'mount -t tmpfs tmpfs /var/tmp && exec "$0" -c "$1"'
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", fresh, sys.executable, code],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["submitted"] * 4
