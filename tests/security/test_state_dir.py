"""Attacks by another user of the server's machine on what a root server reads and writes at
start: a state directory they made or may write to, a key file or link put in it, and a ready
file that is a link to a file of root's.

Each must stop the server before it serves, naming the path and what to do.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ..servers import cli

NOBODY = 65534


def start(state_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`inspect-swarm server` on `state_dir`, expected to refuse to start (a server that
    starts is stopped by the timeout, which fails the test)."""
    return subprocess.run(
        cli(
            "server",
            "--port",
            "0",
            "--state-dir",
            str(state_dir),
            "--no-context",
            "--isolation",
            "process",
            *extra,
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused(result: subprocess.CompletedProcess[str], *named: str) -> str:
    assert result.returncode == 1, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("inspect-swarm: error: --state-dir: "), error
    assert all(name in error for name in named), error
    return error


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A state directory another user made, world-writable, with the key they chose."""
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    (state / "api-key").write_text("chosen-by-nobody\n")
    os.chown(state / "api-key", NOBODY, NOBODY)
    os.chown(state, NOBODY, NOBODY)
    return state


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's files need root to make")
def test_a_state_directory_of_another_user_is_refused(planted: Path) -> None:
    error = refused(start(planted), str(planted), f"belongs to uid {NOBODY}")
    assert "name a directory of the server's user" in error
    assert (planted / "api-key").stat().st_uid == NOBODY  # untouched, never read


def test_a_state_directory_others_may_write_to_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    error = refused(start(state), str(state), "writable by its group or others")
    assert f"chmod go-w {state}" in error
    assert not (state / "swarm.db").exists()


def test_a_link_in_the_state_directory_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    (state / "api-key").symlink_to(secret)
    error = refused(start(state), str(state / "api-key"), "symbolic link", "remove it")
    assert error
    assert secret.read_text() == "root's\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's files need root to make")
def test_a_file_of_another_user_in_the_state_directory_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "api-key").write_text("chosen\n")
    os.chown(state / "api-key", NOBODY, NOBODY)
    refused(start(state), str(state / "api-key"), f"belongs to uid {NOBODY}")


def test_a_ready_file_that_is_a_link_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    target = tmp_path / "roots-file"
    target.write_text("root's\n")
    ready = tmp_path / "ready.json"
    ready.symlink_to(target)
    result = start(tmp_path / "state", "--ready-file", str(ready))
    assert result.returncode == 1, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"inspect-swarm: error: --ready-file: {ready}: "), error
    assert "remove it" in error
    assert target.read_text() == "root's\n"
    assert ready.is_symlink()
