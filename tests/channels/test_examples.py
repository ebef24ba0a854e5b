"""The channel examples run offline on their scripts (asyncio and trio); shared_sandbox.py,
which needs a swarm server, runs in tests/sandbox/swarm_server."""

import ast
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


def test_a_channel_with_records_is_written_on_public_names(backend: str, tmp_path: Path) -> None:
    tree = ast.parse((EXAMPLES / "guestbook.py").read_text())
    ours = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom | ast.Import)
        and any(
            name.startswith("inspect_swarm")
            for name in ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            + ([a.name for a in node.names] if isinstance(node, ast.Import) else [])
        )
    ]
    assert ours and all(
        isinstance(node, ast.ImportFrom)
        and node.module == "inspect_swarm"
        and not any(a.name.startswith("_") for a in node.names)
        for node in ours
    ), [ast.unparse(node) for node in ours]
    sample = run_example("guestbook", "guestbook_signing", tmp_path)
    store = sample.store  # type: ignore[attr-defined]
    metrics = {m["name"]: m for m in store["inspect_swarm:metrics"]["members"]}
    # guest-1's second signature was refused by the channel's own control
    assert metrics["guest-1"]["comm"]["guestbook"]["records"] == 1
    assert metrics["guest-1"]["comm"]["guestbook"]["rejections"] == {"once": 1}
    assert metrics["guest-2"]["comm"]["guestbook"]["records"] == 1
    assert metrics["guest-2"]["comm"]["guestbook"]["listings"] == 1
    statuses = {m["name"]: m["status"] for m in store["inspect_swarm:result"]["members"]}
    assert statuses == {"guest-1": "submitted", "guest-2": "submitted"}
    assert store["inspect_swarm:result"]["final"]["member"] == "guest-1"
    assert sample.scores["includes"].value == "C"  # type: ignore[attr-defined]
