"""examples/topologies.py: every topology, the coordinator's and the task list's included, on the
same questions, number of members and budget, offline on its script; and a controller chosen by
name from the command line."""

import re
from pathlib import Path

import pytest
from inspect_ai import eval
from inspect_ai.event import ModelEvent
from inspect_ai.log import EvalSample, resolve_sample_attachments
from topologies import TOPOLOGIES, Topology, topologies

from inspect_swarm.scripted import scripted_model
from inspect_swarm.scripted._script import ScriptSource

from ..loaded import loaded
from .helpers import cli_eval, result, statuses

ROOT = Path(__file__).parents[2]
EXPECTED = {
    # stop reason, correct answers of 3, the statuses in the "product" sample
    "leaderless": ("submitted", 0, ("submitted", "stopped", "stopped")),
    "verified": ("verified", 3, ("submitted", "submitted", "stopped")),
    "quiescence": ("quiescence", 3, ("submitted", "submitted", "stopped")),
    "rounds": ("controller:rounds_done", 3, ("submitted", "submitted", "submitted")),
    "vote": ("all_done", 3, ("submitted", "submitted", "submitted")),
    "composed": ("verified", 3, ("submitted", "submitted", "stopped")),
    "coordinator": ("controller:lead_done", 3, ("submitted", "submitted", "submitted")),
    "task_list": ("quiescence", 3, ("stopped", "submitted", "submitted")),
}


SCRIPT = ROOT / "examples" / "topologies.yaml"


def run_arm(topology: Topology, tmp_path: Path, script: ScriptSource = SCRIPT) -> list[EvalSample]:
    [log] = eval(
        topologies(topology),
        model=scripted_model(script, name="demo"),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples and len(log.samples) == 3
    assert log.eval.task_args["topology"] == topology
    return log.samples


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_each_topology_runs_on_the_same_script(topology: Topology, tmp_path: Path) -> None:
    check_arm(topology, run_arm(topology, tmp_path))


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_each_topology_gives_its_result_on_a_loaded_machine(
    topology: Topology, tmp_path: Path
) -> None:
    # the members the script names first are the slowest: each arm stops where it did
    check_arm(topology, run_arm(topology, tmp_path, loaded(SCRIPT)))


def check_arm(topology: Topology, samples: list[EvalSample]) -> None:
    reason, correct, product = EXPECTED[topology]
    assert {s.store["inspect_swarm:ledger"]["stop_reason"] for s in samples} == {reason}
    assert sum(s.scores is not None and s.scores["match"].value == "C" for s in samples) == correct
    [first] = [s for s in samples if s.id == "product"]
    assert tuple(statuses(first).values()) == product
    # the same budget in every arm
    assert first.store["inspect_swarm:ledger"]["caps"]["tokens"] is not None


def test_the_quiescence_arm_answers_with_the_latest_submission(tmp_path: Path) -> None:
    [product] = [s for s in run_arm("quiescence", tmp_path) if s.id == "product"]
    assert result(product)["final"]["mode"] == "last"
    assert result(product)["final"]["member"] == "solver-2"


def test_the_coordinator_arm_answers_with_the_lead_and_its_workers_start_on_work(
    tmp_path: Path,
) -> None:
    [product] = [s for s in run_arm("coordinator", tmp_path) if s.id == "product"]
    final = result(product)["final"]
    assert (final["mode"], final["member"]) == ("controller", "lead")
    # the workers started on their work: a task for worker-1, a message for worker-2
    events = resolve_sample_attachments(product).events
    inputs = [m.text for e in events if isinstance(e, ModelEvent) for m in e.input]
    assert any(t.startswith("You have been given work: task t-1 from lead (tasks)") for t in inputs)


def test_a_bad_topology_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'star' is not a topology"):
        topologies("star")  # type: ignore[arg-type]


def test_a_controller_by_name_from_the_command_line(tmp_path: Path) -> None:
    log = cli_eval(
        ROOT / "examples/getting_started.yaml",
        tmp_path,
        "members={factory: react, count: 3}",
        "channels=[]",
        "controller=vote",
    )
    assert log.samples
    # react-2 answers 42 first, but the two others agree on 41 (in either order: their steps
    # take the same time)
    final = result(log.samples[0])["final"]
    assert final["mode"] == "controller" and final["member"] in ("react-1", "react-3")
    assert re.fullmatch(
        r"vote: 2 of 3 submissions agree \(2: react-[13], react-[13]; 1: react-2\)",
        final["reason"],
    )
    assert log.samples[0].output.completion == "41"
    assert log.samples[0].store["inspect_swarm:ledger"]["stop_reason"] == "all_done"
