"""The channel examples run offline on their scripts (asyncio and trio); shared_sandbox.py,
which needs a swarm server, runs in tests/sandbox/swarm_server."""

import importlib.util
from pathlib import Path

from inspect_ai import eval

from inspect_swarm.scripted import scripted_model

EXAMPLES = Path(__file__).parents[2] / "examples"


def run_example(name: str, task_fn: str, tmp_path: Path) -> object:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    [log] = eval(
        getattr(module, task_fn)(),
        model=scripted_model(str(EXAMPLES / f"{name}.yaml")),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples
    return log.samples[0]


def test_shared_memory_example(backend: str, tmp_path: Path) -> None:
    sample = run_example("shared_memory", "shared_memory_count", tmp_path)
    assert sample.scores["includes"].value == "C"  # type: ignore[attr-defined]
    waited = [
        e.data
        for e in sample.events  # type: ignore[attr-defined]
        if e.event == "info" and isinstance(e.data, dict) and e.data.get("kind") == "waited"
    ]
    assert [w["outcome"] for w in waited] == ["news"]
    assert waited[0]["files"][0]["writer"] == "w-2"
