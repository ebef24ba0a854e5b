"""coordinator(): the lead starts alone, the others start on the work the channels give them,
and the swarm ends with the lead (asyncio and trio, on the scripted model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from inspect_ai.event import ModelEvent
from inspect_ai.log import EvalSample, resolve_sample_attachments
from inspect_ai.util import message_limit

from inspect_swarm import coordinator, member, messages, shared_memory, swarm, tasks

from ..runtime.helpers import cli_eval, result, run, statuses, stop_reason
from .members import WAIT, board_member, comm, spans, tool

TEAM = ("lead", "w-1", "w-2", "idle")
SLOW = {"text": "still at it", "delay": 1.0}


def begun(sample: EvalSample) -> dict[str, float]:
    """When each member's agent span began."""
    return {s.name: s.timestamp.timestamp() for s in spans(sample).values() if s.type == "agent"}


def first_input(sample: EvalSample, name: str) -> str:
    """The text of the first user message of the member's first model call."""
    events = resolve_sample_attachments(sample).events
    calls = [e for e in events if isinstance(e, ModelEvent)]
    [span] = [s.id for s in spans(sample).values() if s.type == "agent" and s.name == name]
    [call, *_] = [e for e in calls if e.span_id == span]
    return next(m.text for m in call.input if m.role == "user")


def team(script: dict[str, Any], tmp_path: Path, **kwargs: Any) -> EvalSample:
    return run(
        swarm(
            [member(board_member, name=n) for n in TEAM],
            controller=coordinator("lead", **kwargs),
            channels=[messages(), tasks()],
        ),
        script,
        tmp_path,
    )


def test_the_lead_hands_out_work_and_its_answer_ends_the_swarm(
    backend: str, tmp_path: Path
) -> None:
    sample = team(
        {
            "lead": [
                tool("tasks", command="create", title="count", assignee="w-1"),
                {"text": "w-1 has started", "after": {"w-1": 1}},
                tool("messages", command="send", to="w-2", text="check w-1's count"),
                WAIT,
                {"text": "w-1 is done", "after": {"w-1": 4}},
                {"submit": "25"},
            ],
            "w-1": [
                tool("tasks", command="claim", task="t-1"),
                tool("tasks", command="update", task="t-1", version=2, status="done"),
                {"submit": "24"},
            ],
            "w-2": [
                tool("messages", command="read"),
                {"text": "still at it", "after": "stop"},
                {"submit": "26"},
            ],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "controller:lead_done"
    # w-1 submitted first, but the lead's answer is the swarm's
    final = result(sample)["final"]
    assert (final["mode"], final["member"], final["reason"]) == (
        "controller",
        "lead",
        ("the lead's answer"),
    )
    assert statuses(sample) == {"lead": "submitted", "w-1": "submitted", "w-2": "stopped",
                                "idle": None}  # fmt: skip
    # each worker started only once its work was delivered, on an input naming it by id
    delivered = {e.data["op"]: e.timestamp.timestamp() for e in comm(sample, "delivered")}  # type: ignore[index]
    start = begun(sample)
    assert delivered["create"] < start["w-1"] < delivered["message"] < start["w-2"]
    assert "idle" not in start
    assert first_input(sample, "w-1") == (
        "You have been given work: task t-1 from lead (tasks). Read it with the tools of the "
        "channels named, do it, and report back through them."
    )
    assert first_input(sample, "w-2").startswith(
        "You have been given work: message m-1 from lead (messages)."
    )
    # the lead started on the sample's input, and every preamble says how the team works
    assert first_input(sample, "lead") == "What is six times seven?"
    events = resolve_sample_attachments(sample).events
    inputs = [m.text for e in events if isinstance(e, ModelEvent) for m in e.input]
    assert "One member leads: it alone starts with the task" in " ".join(inputs)


def test_a_message_to_all_starts_every_other_member(backend: str, tmp_path: Path) -> None:
    sample = team(
        {
            "lead": [
                tool("messages", command="send", to="all", text="everyone: check 25"),
                WAIT,
                WAIT,
                WAIT,
                {"submit": "25"},
            ],
            "*": [tool("messages", command="send", to="lead", text="25 it is"), {"submit": "25"}],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "controller:lead_done"
    assert set(TEAM) <= set(begun(sample))
    assert result(sample)["final"]["member"] == "lead"


def test_a_lead_without_an_answer_leaves_it_to_the_final_rule(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            [
                member(board_member, name="lead", limits=[message_limit(6)]),
                member(board_member, name="w-1"),
            ],
            controller=coordinator(),
            channels=[tasks()],
        ),
        {
            "lead": [
                tool("tasks", command="create", title="answer it", assignee="w-1"),
                WAIT,
                {"text": "thinking", "delay": 0.3},
                {"text": "still thinking"},
                {"text": "and more"},
            ],
            "w-1": [{"submit": "42"}],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "controller:lead_done"
    assert statuses(sample) == {"lead": "member_limit:message", "w-1": "submitted"}
    final = result(sample)["final"]
    assert (final["mode"], final["member"]) == ("first", "w-1")


def test_work_given_as_the_lead_ends_leaves_a_consistent_record(
    backend: str, tmp_path: Path
) -> None:
    # w-1's task is delivered just before the lead's end: w-1 starts and gets the stop at once
    sample = team(
        {
            "lead": [
                tool("tasks", command="create", title="late", assignee="w-1"),
                {"submit": "42"},
            ],
            "w-1": [SLOW, {"submit": "41"}],
        },
        tmp_path,
    )
    assert sample.error is None
    assert stop_reason(sample) == "controller:lead_done"
    members = {m["name"]: (m["state"], m["status"]) for m in result(sample)["members"]}
    assert members["lead"] == ("ended", "submitted")
    assert members["w-1"] in (("ended", "stopped"), ("ended", "cancelled"))
    assert members["w-2"] == members["idle"] == ("pending", None)
    assert result(sample)["final"]["member"] == "lead"


CLI_SCRIPT = """
members:
  swarm_react-1:
    - {tool: messages, arguments: {command: send, to: swarm_react-2, text: "Is it 42?"}}
    - {tool: swarm_wait, arguments: {}}
    - {tool: messages, arguments: {command: read}, delay: 0.5}
    - {submit: "42"}
  swarm_react-2:
    - {tool: messages, arguments: {command: read}}
    - {tool: messages, arguments: {command: send, reply_to: m-1, text: "It is."}}
    - {submit: "42"}
"""


def test_the_command_line_names_the_coordinator_and_the_first_member_leads(
    tmp_path: Path,
) -> None:
    (tmp_path / "team.yaml").write_text(CLI_SCRIPT)
    log = cli_eval(
        tmp_path / "team.yaml",
        tmp_path / "logs",
        "members={factory: swarm_react, count: 3}",
        "channels=[messages, tasks]",
        "controller=coordinator",
    )
    assert log.samples
    [sample] = log.samples
    assert stop_reason(sample) == "controller:lead_done"
    assert result(sample)["final"]["member"] == "swarm_react-1"
    assert statuses(sample) == {
        "swarm_react-1": "submitted",
        "swarm_react-2": "submitted",
        "swarm_react-3": None,
    }


@pytest.mark.parametrize(
    ("kwargs", "channels", "error"),
    [
        (
            {"lead": "boss"},
            [tasks()],
            r"coordinator\(lead=...\): 'boss' is not a member of the roster \(lead, w-1, w-2, "
            r"idle\)\. Name one of them",
        ),
        (
            {"lead": ""},
            [tasks()],
            r"coordinator\(lead=...\): lead must be a member's name, not ''",
        ),
        (
            {},
            [shared_memory()],
            r"swarm\(\): the controller 'coordinator' starts members on the work a channel "
            r"gives them, and none of the channels \['shared_memory'\] hands out work\. Add one "
            r"that does, such as tasks\(\) or messages\(\)",
        ),
    ],
)
def test_refusals_at_swarm_time(kwargs: dict[str, Any], channels: list[Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        swarm(
            [member(board_member, name=n) for n in TEAM],
            controller=coordinator(**kwargs),
            channels=channels,
        )


def test_a_lead_that_is_no_name_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"coordinator\(lead=...\): lead must be a member's name"):
        coordinator(lead=3)  # type: ignore[arg-type]
