"""The Channel API: registration, rebuilding from the log, construction errors."""

from __future__ import annotations

import contextvars
from pathlib import Path

import pytest
from inspect_ai._util.registry import create_registry_object, registry_info, registry_params

from inspect_swarm import (
    Channel,
    MemberInfo,
    filesystem,
    member,
    shared_memory,
    swarm,
    swarm_channel,
    tasks,
)
from inspect_swarm._channels._filesystem_channel import FilesystemChannel
from inspect_swarm._channels._shared_memory import SharedMemoryChannel

from ..runtime.helpers import run
from .helpers import FakeHost


class LeadChannel(Channel):
    def __init__(self, lead: str) -> None:
        self.lead = lead

    def instructions(self, member: MemberInfo) -> str | None:
        if member.name == self.lead:
            return "Write the plan to /shared/plan.md before you start."
        return f"Read /shared/plan.md, which {self.lead} writes, before you start."


@swarm_channel
def lead(name: str) -> Channel:
    """Tell members that one of them writes a plan for the others."""
    return LeadChannel(name)


def test_channels_are_registered_with_every_argument() -> None:
    channel = shared_memory(max_files=5)
    assert registry_info(channel).name == "inspect_swarm/shared_memory"
    assert registry_params(channel) == {
        "max_files": 5,
        "max_file_bytes": 16_000,
        "max_file_lines": 1_000,
        "max_board_bytes": 400_000,
        "rate": [60, 60.0],
        "max_wait": 600,
        "readers": None,
        "writers": None,
    }
    rebuilt = create_registry_object(
        "swarm_channel", registry_info(channel).name, registry_params(channel)
    )
    assert isinstance(rebuilt, SharedMemoryChannel)
    assert (rebuilt.max_files, rebuilt.storm.rate, rebuilt.max_wait) == (5, (60, 60.0), 600)
    fs = create_registry_object("swarm_channel", "inspect_swarm/filesystem", {"shared": "/w"})
    assert isinstance(fs, FilesystemChannel) and fs.shared == "/w"


def test_the_lead_example_runs_as_written(backend: str, tmp_path: Path) -> None:
    from inspect_ai.agent import react

    channel = lead("planner")
    assert registry_params(channel) == {"name": "planner"}
    assert (channel.name, channel.prefix, channel.reach, channel.max_wait) == (
        None,
        None,
        "loop",
        None,
    )
    assert channel.instructions(MemberInfo("planner")) == (
        "Write the plan to /shared/plan.md before you start."
    )
    sample = run(
        swarm([member(react, name="planner"), member(react, name="doer")], channels=[channel]),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    texts = " ".join(sample.attachments.values())
    assert "Read /shared/plan.md, which planner writes, before you start." in texts
    assert "Write the plan to /shared/plan.md before you start." in texts


def test_a_factory_must_return_a_channel() -> None:
    @swarm_channel(name="renamed")
    def plain() -> Channel:
        return Channel()

    assert registry_info(plain()).name == "renamed"
    assert plain().open(None) is None  # type: ignore[arg-type]
    assert plain().instructions(MemberInfo("a")) is None


def test_hands_out_work_is_set_exactly_when_the_state_is_a_work_state() -> None:
    # a context of its own, so the stand-in's swarm does not outlive the test
    context = contextvars.copy_context()
    board = shared_memory()
    board.hands_out_work = True
    with pytest.raises(TypeError, match=r"hands_out_work is True but its state does not implement"):
        context.run(FakeHost, ["a"], [board])
    task_list = tasks()
    task_list.hands_out_work = False
    with pytest.raises(TypeError, match=r"hands_out_work is False but its state implements"):
        context.run(FakeHost, ["a"], [task_list])


def test_filesystem_instructions() -> None:
    text = filesystem().instructions(MemberInfo("w-1"))
    assert text is not None
    assert "/shared," in text and "/shared/notes.md" in text and "/scratch/w-1" in text
    custom = filesystem(shared="/work/shared", scratch="/work/{member}").instructions(
        MemberInfo("a")
    )
    assert custom is not None and "/work/shared/notes.md" in custom and "/work/a." in custom
    volume = filesystem(shared="/vol", shared_volume=True)
    text = volume.instructions(MemberInfo("a"))
    assert text is not None
    assert "same in every member's sandbox" in text and "scratch" not in text
    assert "/vol/notes.md" in text
    assert (
        filesystem(notes="/vol/n.md", shared="/vol", shared_volume=True).notes_path == "/vol/n.md"
    )
    assert filesystem().open(None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shared": "shared", "shared_volume": True}, "absolute path"),
        ({"notes": "../notes.md", "shared_volume": True}, "notes must be inside shared"),
        ({"notes": "/elsewhere/n.md", "shared_volume": True}, "notes must be inside shared"),
        ({"scratch": "/scratch/{name}"}, "placeholders other than {member}"),
        ({"shared": ""}, "shared must be a non-empty path"),
        ({"shared_volume": "yes"}, "shared_volume must be True or False"),
    ],
)
def test_filesystem_refusals(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        filesystem(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_files": 0}, "max_files must be a whole number from 1 to 10,000, not 0"),
        ({"max_files": 10_001}, "max_files"),
        ({"max_files": True}, "max_files"),
        ({"max_file_bytes": 262_145}, "max_file_bytes must be a whole number from 1 to 262,144"),
        ({"max_file_lines": 0}, "max_file_lines"),
        ({"max_board_bytes": 15_999}, "max_board_bytes must be a whole number from 16,000"),
        ({"max_board_bytes": 16_777_217}, "max_board_bytes"),
        ({"max_wait": 0}, "max_wait must be a whole number from 1 to 3,600"),
        ({"max_wait": 3_601}, "max_wait"),
        ({"rate": (0, 60.0)}, "rate must be"),
        ({"rate": (10, 0)}, "rate must be"),
        ({"rate": (10,)}, "rate must be"),
        ({"rate": "60/60"}, "rate must be"),
    ],
)
def test_shared_memory_argument_ranges(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shared_memory(**kwargs)  # type: ignore[arg-type]


def test_shared_memory_arguments_accepted() -> None:
    assert shared_memory(rate=[10, 5]).storm.rate == (10, 5.0)
    assert shared_memory(rate=None).storm.rate is None
    board = shared_memory(max_file_bytes=1, max_board_bytes=1, max_wait=3_600)
    assert (board.name, board.prefix, board.reach, board.max_wait) == (
        "shared_memory",
        "w",
        "member",
        3_600,
    )


def test_shared_memory_checks_member_names() -> None:
    board = shared_memory()
    board.check([MemberInfo("w-1"), MemberInfo("a" + "b" * 47)])
    with pytest.raises(ValueError, match=r"'W-1', '1w' are not\. Rename the members"):
        board.check([MemberInfo("W-1"), MemberInfo("1w"), MemberInfo("ok")])
    with pytest.raises(ValueError, match="lowercase letter"):
        board.check([MemberInfo("a" * 49)])
    with pytest.raises(ValueError, match="lowercase letter"):
        swarm(member(_react(), name="Upper"), channels=["shared_memory"])


def _react() -> object:
    from inspect_ai.agent import react

    return react()
