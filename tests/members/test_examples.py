import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest
from inspect_ai import eval, task_with
from inspect_ai._util.registry import is_registry_object
from inspect_ai.dataset import Sample
from inspect_ai.event import InfoEvent, ModelEvent, ToolEvent
from inspect_ai.log import EvalSample
from inspect_ai.util import SandboxEnvironmentSpec

from inspect_swarm.sandbox import SwarmServerSandboxEnvironment
from inspect_swarm.scripted import scripted_model

from ..loaded import loaded

EXAMPLES = Path(__file__).parents[2] / "examples"


def example(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # the examples import each other as inspect loads them: from their own folder
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module(name)


def run_example(
    module: ModuleType, task: str, script: str, tmp_path: Path, *, load: bool = False
) -> EvalSample:
    path = EXAMPLES / script
    [log] = eval(
        getattr(module, task)(),
        model=scripted_model(loaded(path) if load else path, name="demo"),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples
    return log.samples[0]


def members(sample: EvalSample) -> dict[str, str]:
    return {m["name"]: m["status"] for m in sample.store["inspect_swarm:result"]["members"]}


# loaded: the member scripted to prove first is the slowest, and the result is the same
@pytest.mark.parametrize("load", [False, True], ids=["unloaded", "loaded"])
def test_stop_on_proof(
    backend: str, load: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = example("stop_on_proof", monkeypatch)
    sample = run_example(module, "stop_on_proof", "stop_on_proof.yaml", tmp_path, load=load)
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "controller:proved"
    assert members(sample) == {
        "checked_solver-1": "submitted",
        "checked_solver-2": "member_limit:custom",
        "checked_solver-3": "stopped",
    }
    assert sample.output.completion == "42"
    assert sample.scores is not None and sample.scores["includes"].value == "C"


def test_proof_swarm(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = example("proof_swarm", monkeypatch)
    sample = run_example(module, "proof_swarm", "proof_swarm_script.yaml", tmp_path)
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "controller:proved"
    # agent-1's builder found no proof in what it left; agent-2's answer is one
    assert members(sample) == {"agent-1": "member_limit:custom", "agent-2": "submitted"}
    record = sample.store["inspect_swarm:result"]["members"]
    assert [m["sandbox"] for m in record] == ["agent-1", "agent-2"]
    # the comparator read each member's answer from the member's own sandbox
    checks = {
        e.span_id: str(e.result)
        for e in sample.events
        if isinstance(e, ToolEvent) and e.function == "check"
    }
    assert sorted(checks.values()) == [
        "NOT A PROOF: 7 is not a factor of 8051 other than 1 and 8051",
        "PROOF: 83 divides 8051",
    ]
    # the board is the members' channel: each wrote to it, and agent-2 read agent-1's note
    comm = [
        e.data
        for e in sample.events
        if isinstance(e, InfoEvent) and isinstance(e.data, dict) and e.data.get("type") == "comm"
    ]
    assert {(d["member"], d["op"]) for d in comm if d["kind"] == "delivered"} == {
        ("agent-1", "append"),
        ("agent-2", "create"),
    }
    [waited] = [d for d in comm if d["kind"] == "waited"]
    assert (waited["member"], waited["outcome"]) == ("agent-2", "news")
    assert waited["ended"] == [{"member": "agent-1", "status": "member_limit:custom"}]
    assert [d["member"] for d in comm if d["kind"] == "read"] == ["agent-2"]
    assert sample.scores is not None
    score = sample.scores["any_member_proved"]
    assert (score.value, score.metadata) == ("C", {"passed": ["agent-2"]})


def test_proof_swarm_needs_volumes_the_swarm_server_cannot_share() -> None:
    # its comparator sees the members' volumes; sandboxes on a swarm server cannot share one
    with pytest.raises(ValueError, match="volume 'agent-1' is mounted by services"):
        SwarmServerSandboxEnvironment._service_names(str(EXAMPLES / "proof_swarm.yaml"))


def example_tasks() -> list[tuple[str, str]]:
    """Every task the examples define, as (module, task function)."""
    found = []
    for path in sorted(EXAMPLES.glob("*.py")):
        module = importlib.import_module(path.stem)
        found += [
            (path.stem, name)
            for name, value in vars(module).items()
            if is_registry_object(value, type="task") and value.__module__ == path.stem
        ]
    return found


PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


@pytest.mark.parametrize(("module", "task_name"), example_tasks())
def test_no_example_sends_an_unfilled_placeholder(
    module: str, task_name: str, tmp_path: Path
) -> None:
    """No sample input or member preamble of an example has a `{placeholder}` left in it."""
    example_task = getattr(importlib.import_module(module), task_name)()
    samples = list(example_task.dataset)
    assert not [s.input for s in samples if PLACEHOLDER.search(str(s.input))]
    # every member's first call shows what it was sent: the input, then its preamble. A
    # multidir sandbox stays; another becomes one multidir environment, with no sample files
    # and no scorer to read what members leave in it
    task_with(example_task, dataset=[Sample(input=samples[0].input, id=samples[0].id)])
    spec = example_task.sandbox
    if spec is not None and spec.type != "multidir":
        task_with(example_task, sandbox=SandboxEnvironmentSpec("multidir"), scorer=None)
    [log] = eval(
        example_task,
        model=scripted_model({"members": {"*": [{"submit": "x"}]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples
    sent = [
        message.text
        for event in log.samples[0].events
        if isinstance(event, ModelEvent)
        for message in event.input
        if message.role in ("system", "user")
    ]
    members = log.samples[0].store["inspect_swarm:result"]["members"]
    assert len(sent) >= len(members) and all(m["state"] == "ended" for m in members)
    assert [text for text in sent if PLACEHOLDER.search(text)] == []
