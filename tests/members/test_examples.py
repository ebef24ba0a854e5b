import importlib
from pathlib import Path
from types import ModuleType

import pytest
from inspect_ai import eval
from inspect_ai.log import EvalSample

from inspect_swarm.scripted import scripted_model

EXAMPLES = Path(__file__).parents[2] / "examples"


def example(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # the examples import each other as inspect loads them: from their own folder
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module(name)


def run_example(module: ModuleType, task: str, script: str, tmp_path: Path) -> EvalSample:
    [log] = eval(
        getattr(module, task)(),
        model=scripted_model(EXAMPLES / script, name="demo"),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples
    return log.samples[0]


def members(sample: EvalSample) -> dict[str, str]:
    return {m["name"]: m["status"] for m in sample.store["inspect_swarm:result"]["members"]}


def test_stop_on_proof(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = example("stop_on_proof", monkeypatch)
    sample = run_example(module, "stop_on_proof", "stop_on_proof.yaml", tmp_path)
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "controller:proved"
    assert members(sample) == {
        "checked_solver-1": "submitted",
        "checked_solver-2": "member_limit:custom",
        "checked_solver-3": "stopped",
    }
    assert sample.output.completion == "42"
    assert sample.scores is not None and sample.scores["includes"].value == "C"


def test_proof_swarm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = example("proof_swarm", monkeypatch)
    sample = run_example(module, "proof_swarm", "proof_swarm_script.yaml", tmp_path)
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "controller:proved"
    # agent-1's builder found no proof in what it left; agent-2's answer is one
    assert members(sample) == {"agent-1": "member_limit:custom", "agent-2": "submitted"}
    record = sample.store["inspect_swarm:result"]["members"]
    assert [m["sandbox"] for m in record] == ["agent-1", "agent-2"]
    assert sample.scores is not None
    score = sample.scores["any_member_proved"]
    assert (score.value, score.metadata) == ("C", {"passed": ["agent-2"]})
