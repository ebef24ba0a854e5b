"""A sweep of real `inspect eval` runs (mockllm, offline), one arm per sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspect_swarm.client import sample_arms, sweep

from ..servers import environment_args, needs_namespaces, start_server

pytestmark = [needs_namespaces, pytest.mark.slow]

TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes

@task
def tiny():
    return Task(dataset=[Sample(id=i, input="say hi", target="") for i in (1, 2)],
                scorer=includes())
"""


def test_sweep_gathers_logs_in_one_directory(tmp_path: Path) -> None:
    shared = tmp_path / "sweep"
    shared.mkdir()
    (shared / "tiny.py").write_text(TASK)
    # the environment that runs `inspect` too
    server = start_server(
        tmp_path / "state", "--memory-gib", "4", "--share", str(shared), *environment_args()
    )
    try:
        arms = {
            "arm-a": ["tiny.py", "--model", "mockllm/model", "--limit", "1"],
            **sample_arms("tiny.py", [2], ["--model", "mockllm/model"]),
        }
        with server.client() as client:
            manifest = sweep(
                arms,
                shared / "logs",
                client=client,
                size="1x1",
                timeout_seconds=120,
                env={"INSPECT_DISPLAY": "none"},
                cwd=shared,
                poll_interval=0.2,
            )
    finally:
        server.kill()
    assert [a["arm"] for a in manifest["arms"]] == ["arm-a", "sample-2"]
    for arm in manifest["arms"]:
        assert arm["status"] == "succeeded", arm["stderrTail"]
        (log,) = arm["logs"]
        assert (Path(arm["logDir"]) / log).is_file()  # the log is on the host
    assert json.loads((shared / "logs" / "sweep.json").read_text()) == manifest


def test_sweep_checks_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="log_dir"):
        sweep({"a": []}, "relative/logs")
    with pytest.raises(ValueError, match="arms"):
        sweep({"bad name": []}, tmp_path)
