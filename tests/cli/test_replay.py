"""`inspect-swarm replay` as a user runs it: the console script in a process of its own."""

from __future__ import annotations

from pathlib import Path

from inspect_swarm.scripted import scripted_model

from ..scripted.test_replay import evaluate, racing_task
from ..servers import run_script
from .test_startup import imported


def test_replay_writes_a_script_the_scripted_model_reads(tmp_path: Path) -> None:
    original = evaluate(
        racing_task(), scripted_model({"members": {"*": [{"submit": "42"}]}}), tmp_path
    )
    assert original.location is not None
    output = tmp_path / "replay.yaml"
    done = run_script("replay", original.location, "-o", str(output))
    assert done.returncode == 0, done.stderr
    assert f"wrote {output}: 1 sample(s), 2 member script(s)" in done.stderr
    # the header says how to run it; the script is one the scripted model takes
    assert output.read_text().startswith("# Replays ")
    scripted_model(output)


def test_replay_refuses_a_sample_the_log_does_not_hold(tmp_path: Path) -> None:
    original = evaluate(
        racing_task(), scripted_model({"members": {"*": [{"submit": "42"}]}}), tmp_path
    )
    assert original.location is not None
    done = run_script("replay", original.location, "--sample", "nope", "-o", "x.yaml")
    assert done.returncode == 1
    assert "has no sample 'nope' in epoch 1" in done.stderr
    done = run_script("replay", str(tmp_path), "-o", "x.yaml")
    assert done.returncode == 1
    assert "is not a log file" in done.stderr
    assert not Path("x.yaml").exists()


def test_replay_help_imports_no_inspect_ai() -> None:
    assert "inspect_ai" not in imported("replay", "--help")
