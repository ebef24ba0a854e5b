"""The project's scripts tell a newcomer what they are doing."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def stand_in(path: Path, script: str) -> None:
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


def test_setup_says_it_installs_before_it_does(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup", tmp_path / "scripts" / "setup")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    # stand-ins for the environment's python and uv that note each call instead of
    # installing; python's `pip install uv` puts uv's in place
    bin = tmp_path / ".venv" / "bin"
    bin.mkdir(parents=True)
    stand_in(bin / "uv.made", f'echo "uv $*" >> {tmp_path}/calls')
    stand_in(bin / "python", f'echo "python $*" >> {tmp_path}/calls; mv {bin}/uv.made {bin}/uv')
    done = subprocess.run(
        ["bash", "scripts/setup"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "installing" in done.stderr, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [call.split(" -e ")[0] for call in calls] == [
        "python -m pip install --quiet uv",
        "uv pip install --quiet --python .venv/bin/python --compile-bytecode",
    ]
    # once installed, it says nothing
    again = subprocess.run(
        ["bash", "scripts/setup"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert again.stderr == ""
