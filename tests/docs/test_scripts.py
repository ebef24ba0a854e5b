"""The project's scripts tell a newcomer what they are doing."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_setup_says_it_installs_before_it_does(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup", tmp_path / "scripts" / "setup")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    # a stand-in for the environment's python that notes each pip call instead of installing
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "pip $*" >> {tmp_path}/calls\n')
    python.chmod(0o755)
    done = subprocess.run(
        ["bash", "scripts/setup"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "installing" in done.stderr, done.stderr
    assert (tmp_path / "calls").read_text().count("pip -m pip install") == 2
    # once installed, it says nothing
    again = subprocess.run(
        ["bash", "scripts/setup"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert again.stderr == ""
