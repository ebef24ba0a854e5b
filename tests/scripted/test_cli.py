import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai.log import list_eval_logs, read_eval_log

TASK = """
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match


@task
def arithmetic():
    return Task(
        dataset=[Sample(id=1, input="1 + 1?", target="2"), Sample(id=2, input="2 + 2?", target="4")],
        solver=react(),
        scorer=match(),
    )
"""

SCRIPT = """
members:
  "*":
    - text: "working on it"
    - submit: 2
samples:
  2:
    main: [{submit: 4}]
price: {input: 1, output: 1}
"""


def test_cli_runs_the_scripted_model_from_a_script_file(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "script.yaml").write_text(SCRIPT)
    argv = [
        "inspect", "eval", "task.py", "--model", "scripted/cli", "-M", "script=script.yaml",
        "--log-dir", "logs", "--display", "none",
    ]  # fmt: skip
    # the scripted model is found through the package's entry point alone
    code = f"import sys; from inspect_ai._cli.main import main; sys.argv = {argv!r}; main()"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    [info] = list_eval_logs(str(tmp_path / "logs"))
    log = read_eval_log(info)
    assert log.status == "success"
    assert log.eval.model == "scripted/cli"
    assert log.eval.model_args == {"script": "script.yaml"}
    assert log.samples is not None
    assert {s.id: s.output.completion for s in log.samples} == {1: "2", 2: "4"}
    assert log.stats.model_usage["scripted/cli"].total_cost == pytest.approx((300 + 30) / 1e6)
