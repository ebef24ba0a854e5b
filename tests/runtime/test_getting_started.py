import os
import subprocess
import sys
from pathlib import Path

import pytest
from getting_started import getting_started
from inspect_ai import Task, eval
from inspect_ai.agent import Agent, agent, react
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageUser
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, Solver, TaskState, solver

from inspect_swarm import member, swarm
from inspect_swarm.scripted import scripted_model

from ..loaded import loaded, outcome
from .helpers import statuses

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("k", [1, 3])
def test_getting_started_runs_offline(k: int, tmp_path: Path) -> None:
    [log] = eval(
        getting_started(k=k),
        model=scripted_model(EXAMPLES / "getting_started.yaml", name="demo"),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples and log.results
    for sample in log.samples:
        record = sample.store["inspect_swarm:result"]
        assert len(record["members"]) == k
        assert record["final"]["member"] is not None
    if k == 3:
        # in each sample the member scripted to answer first is the answer; the others stopped
        answers = {s.id: s.store["inspect_swarm:result"]["final"]["member"] for s in log.samples}
        assert answers == {"product": "react-2", "sum": "react-1", "power": "react-3"}
        assert log.results.scores[0].metrics["accuracy"].value == 1.0
    else:
        assert [statuses(s) for s in log.samples] == [{"react": "submitted"}] * 3


@solver
def setup_note() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.messages.append(ChatMessageUser(content="SETUP RAN"))
        return state

    return solve


def test_the_tasks_setup_runs_first(tmp_path: Path) -> None:
    task = Task(
        dataset=[Sample(input="x", target="42")],
        setup=setup_note(),
        scorer=includes(),
    )
    [log] = eval(
        task,
        solver=swarm(member(react, count=2), channels=[]),
        model=scripted_model({"members": {"*": [{"submit": "42"}]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples
    inputs = [
        [m.text for m in e.input]
        for e in log.samples[0].events
        if e.event == "model"  # type: ignore[union-attr]
    ]
    assert inputs and all("SETUP RAN" in texts for texts in inputs)


class ACPAgent:
    """Stands in for inspect_swe's ACPAgent, which the swarm recognises by its class."""

    async def __call__(self, state: object) -> object:
        return state


@agent
def acp_factory() -> Agent:
    return ACPAgent()  # type: ignore[return-value]


def test_a_factory_that_builds_an_acp_agent_is_refused_when_built(tmp_path: Path) -> None:
    [log] = eval(
        Task(dataset=[Sample(input="x", target="42")], scorer=includes()),
        solver=swarm(member(acp_factory), channels=[]),
        model=scripted_model({"members": {"*": [{"submit": "42"}]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples and log.samples[0].error is not None
    assert "is an ACP agent" in log.samples[0].error.message
    assert statuses(log.samples[0]) == {"acp_factory": "errored"}


def test_the_example_gives_its_result_on_a_loaded_machine(tmp_path: Path) -> None:
    # the members scripted to answer first are the slowest when loaded: the same result
    script = EXAMPLES / "getting_started.yaml"
    outcomes = []
    for run in (script, loaded(script)):
        [log] = eval(
            getting_started(k=3),
            model=scripted_model(run, name="demo"),
            log_dir=str(tmp_path),
            display="none",
        )
        outcomes.append(outcome(log))
    first = {"product": "react-2", "sum": "react-1", "power": "react-3"}
    assert {sample: o.member for sample, o in outcomes[0].items()} == first
    for sample, o in outcomes[0].items():
        assert o.statuses == {
            n: "submitted" if n == first[sample] else "stopped" for n in o.statuses
        }
    assert outcomes[1] == outcomes[0]


def test_the_demo_prints_its_columns_and_rule_in_words(tmp_path: Path) -> None:
    env = {**os.environ, "INSPECT_LOG_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "run_getting_started.py")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "answer '42' from react-2 (the first submission), score C" in done.stdout
    header = lines.index("  MEMBER     STATE    STATUS          TIME")
    assert lines[header + 1].split()[:3] == ["react-1", "ended", "stopped"]
    assert list(tmp_path.glob("*.eval"))  # the log went where it was told
