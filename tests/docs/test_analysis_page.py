"""The Analysis page's first block, as a reader runs it: a fresh interpreter at the root of a
checkout, writing only under `logs/`."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .pages import DOCS, ROOT, run_page


def test_the_first_block_runs_from_the_repository_root(tmp_path: Path) -> None:
    page = (DOCS / "analysis.md").read_text()
    first = re.search(r"```python\n(.*?)```", page, flags=re.S)
    assert first is not None
    # a checkout's root: the examples beside the reader, and nothing else on the path
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = subprocess.run(
        [sys.executable, "-c", first.group(1)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "INSPECT_DISPLAY": "none", "HOME": str(tmp_path.parent / "home")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["examples", "logs"]
    # every file the page writes goes under logs/ (its plots and show's output included)
    code = "".join(re.findall(r"```\w+\n(.*?)```", page, flags=re.S))
    written = re.findall(r'(?:savefig\("|-o |> )([\w./-]+\.(?:png|svg|txt|json))', code)
    assert written and all(path.startswith("logs/") for path in written), written


def test_the_page_runs_on_trio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the backend inspect_ai is told to use reaches the page's evals and the logs that its
    # `inspect-swarm show` and `plot` commands read
    monkeypatch.setenv("INSPECT_ASYNC_BACKEND", "trio")
    run_page(DOCS / "analysis.md", tmp_path)
