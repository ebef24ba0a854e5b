"""The controller API's later event kinds and queries, as a controller that hands out work uses
them: RecordDelivered, ModelCalled, outstanding() and assigned()."""

from collections import Counter
from contextlib import aclosing
from pathlib import Path
from typing import Any

from inspect_ai.agent import react
from inspect_ai.event import ModelEvent

from inspect_swarm import (
    Controller,
    MemberEnded,
    ModelCalled,
    Outstanding,
    RecordDelivered,
    StopReason,
    SwarmControl,
    member,
    swarm,
    swarm_controller,
    swarm_react,
)

from .helpers import metrics_member, result, run
from .todo_channel import todo

SEEN: list[Any] = []


@swarm_controller
def dispatch(lead: str = "lead") -> Controller:
    """Start the lead; start another member once the channels hold work assigned to it."""

    async def run(swarm: SwarmControl) -> StopReason:
        swarm.start(lead)
        kinds = (RecordDelivered, ModelCalled, MemberEnded)
        async with aclosing(swarm.events(*kinds)) as events:
            async for event in events:
                SEEN.append(event)
                if isinstance(event, RecordDelivered):
                    SEEN.append(dict(swarm.outstanding()))
                    for m in swarm.members:
                        if m.state == "pending" and (work := swarm.assigned(m)):
                            swarm.start(m, f"Do {', '.join(a.id for a in work)}.")
        return "all_done"

    return Controller(run)


def test_a_controller_starts_members_on_the_work_assigned_to_them(
    backend: str, tmp_path: Path
) -> None:
    SEEN.clear()
    add = {"tool": "todo", "arguments": {"command": "add", "item": "tests", "assignee": "worker"}}
    done = {"tool": "todo", "arguments": {"command": "done", "item": "tests"}}
    sample = run(
        swarm(
            [
                member(swarm_react, name="lead"),
                member(swarm_react, name="worker"),
                member(react, name="idle"),
            ],
            controller=dispatch(),
            channels=[todo()],
        ),
        {"lead": [add, {"submit": "42"}], "worker": [done, {"submit": "42"}]},
        tmp_path,
    )
    states = {m["name"]: (m["state"], m["status"]) for m in result(sample)["members"]}
    assert states == {
        "lead": ("ended", "submitted"),
        "worker": ("ended", "submitted"),
        "idle": ("pending", None),
    }
    records = [e for e in SEEN if isinstance(e, RecordDelivered)]
    assert [(r.channel, r.record, r.kind, r.sender, r.recipients) for r in records] == [
        ("todo", "t-1", "add", "lead", ()),
        ("todo", "t-2", "done", "worker", ()),
    ]
    # what was open after each record: the item, then nothing
    after = [SEEN[SEEN.index(r) + 1] for r in records]
    assert after == [{"todo": Outstanding(open=("tests",))}, {}]
    # one ModelCalled per completed call of each member
    calls = Counter(e.member for e in SEEN if isinstance(e, ModelCalled))
    assert calls == {m: metrics_member(sample, m)["steps"] for m in ("lead", "worker")}
    inputs = [m.text for e in sample.events if isinstance(e, ModelEvent) for m in e.input]
    assert "Do tests." in inputs
