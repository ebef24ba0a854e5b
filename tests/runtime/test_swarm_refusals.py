"""What swarm() refuses when it is called: the type the spec names, and a message that names
the argument, the bad value and the fix."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.agent import react

from inspect_swarm import (
    Budget,
    Channel,
    filesystem,
    member,
    shared_memory,
    swarm,
    swarm_channel,
)

from .helpers import ROOT


class Named(Channel):
    def __init__(self, name: str, prefix: str) -> None:
        self.name = name
        self.prefix = prefix


@swarm_channel
def named(name: str = "notes", prefix: str = "n") -> Channel:
    return Named(name, prefix)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"controller": 3}, TypeError, r"swarm\(controller=...\): 3 is not a Controller"),
        ({"controller": "nope"}, ValueError, "no controller is registered as 'nope'"),
        ({"channels": "nope"}, ValueError, "no channel is registered as 'nope'"),
        ({"channels": [3]}, TypeError, r"swarm\(channels=...\): 3 is not a Channel"),
        ({"channels": 3}, TypeError, "is not a channel or a list of channels"),
        (
            {"channels": ["filesystem", filesystem()]},
            ValueError,
            r"channels \['filesystem'\] is given more than once",
        ),
        (
            {"channels": [shared_memory(), named(prefix="w")]},
            ValueError,
            r"share the prefix",
        ),
        (
            {"channels": [named(), named(name="notes", prefix="m")]},
            ValueError,
            r"given more than once",
        ),
        ({"budget": 5}, TypeError, r"swarm\(budget=...\): 5 is not a Budget"),
        ({"budget": {"split": [1, 2, 3]}}, ValueError, "split"),
        ({"budget": Budget(split=(1.0, 2.0, 3.0))}, ValueError, "split"),
    ],
)
def test_swarm_refusals(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        swarm(member(react, count=2), **kwargs)


def test_an_empty_roster_is_refused() -> None:
    with pytest.raises(ValueError, match="the roster is empty"):
        swarm([], channels=[])


def test_a_shared_volume_needs_member_sandboxes() -> None:
    with pytest.raises(ValueError, match=r"shared_volume=True\) is for members with their own"):
        swarm(member(react, count=2), channels=[filesystem(shared_volume=True)])


def test_per_member_sandboxes_refuse_the_shared_filesystem_channel() -> None:
    with pytest.raises(ValueError, match="describes a shared sandbox"):
        swarm(member(react, count=2, sandbox="{member}"))
    # the shared-volume form and the board are fine
    swarm(member(react, count=2, sandbox="{member}"), channels=[filesystem(shared_volume=True)])
    swarm(member(react, count=2, sandbox="{member}"), channels=[shared_memory()])


def test_bridged_members_use_the_built_in_channels() -> None:
    # the refusal beside a channel that cannot serve them: tests/members/test_bridged.py
    swarm(member(react, bridged=True), channels=[shared_memory()])
    swarm(member(react, bridged=True), channels=["filesystem", "messages", "tasks", "notes"])


def test_channels_by_name_and_none() -> None:
    swarm(member(react), channels="shared_memory")
    swarm(member(react), channels=[])


@pytest.mark.parametrize(
    ("kwargs", "suggestion"),
    [
        ({"controller": "leaderles"}, "Did you mean 'leaderless'?"),
        ({"channels": "shared_memroy"}, "Did you mean 'shared_memory'?"),
        ({"members": "reac"}, "Did you mean 'react'"),
    ],
)
def test_a_typo_in_a_name_suggests_the_registered_one(
    kwargs: dict[str, Any], suggestion: str
) -> None:
    with pytest.raises(ValueError, match="is registered as") as info:
        swarm(**{"members": member(react, count=2), **kwargs})
    assert suggestion in str(info.value)


def test_a_typo_on_the_command_line_is_one_short_refusal(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "inspect_ai._cli.main", "eval", "examples/getting_started.py",
        "--model", "scripted/demo", "-M", "script=examples/getting_started.yaml",
        "--solver", "inspect_swarm/swarm", "-S", "members=react", "-S", "controller=leaderles",
        "--log-dir", str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "INSPECT_DISPLAY": "plain"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "no controller is registered as 'leaderles'. Did you mean" in " ".join(output.split())
    # the refusal alone, not the traceback of the eval's task groups
    assert "Traceback" not in output and len(output.splitlines()) < 15, output
