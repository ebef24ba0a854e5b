"""Quiescence through the channels' WorkState: the swarm is quiet only when every member waits,
no task is open or claimed and no message is unread (asyncio and trio, on the scripted model)."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

from inspect_ai.log import EvalSample

from inspect_swarm import (
    Controller,
    StopReason,
    SwarmControl,
    member,
    messages,
    quiescence,
    quiescent,
    swarm,
    swarm_controller,
    tasks,
)

from ..runtime.helpers import infos, run, stop_reason
from .members import WAIT, board_member, comm, tool


def waits(sample: EvalSample, name: str) -> list[str]:
    """The outcomes of the member's waits, in order."""
    return [
        e["outcome"] for e in infos(sample, "comm") if e["kind"] == "waited" and e["member"] == name
    ]


# a wait reports the tasks others changed until a list shows them
WATCH = [WAIT, tool("tasks", command="list")] * 4


def test_a_claimed_task_keeps_the_swarm_going_until_it_is_done(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            [member(board_member, name=n) for n in ("p-1", "p-2")],
            controller=quiescence(settle=0.2),
            channels=[tasks()],
        ),
        {
            "p-1": [tool("tasks", command="create", title="count"), *WATCH],
            # claims, then waits with the task claimed; released, it finishes the task
            "p-2": [
                {**tool("tasks", command="list"), "delay": 0.3},
                tool("tasks", command="claim", task="t-1"),
                WAIT,
                tool("tasks", command="update", task="t-1", version=2, status="done"),
                *WATCH,
            ],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "quiescence"
    # every member waited with t-1 claimed, and the waits ended so that p-2 could finish it
    assert waits(sample, "p-2")[0] == "all_waiting"
    assert waits(sample, "p-2")[-1] == "stopping" and waits(sample, "p-1")[-1] == "stopping"
    done = [e.data for e in comm(sample, "delivered") if e.data["status"] == "done"]  # type: ignore[index]
    assert [d["task"] for d in done] == ["t-1"]  # type: ignore[index]


def test_members_that_read_their_messages_end_in_quiescence(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            [member(board_member, name=n) for n in ("a", "b")],
            controller=quiescence(settle=0.2),
            channels=[messages()],
        ),
        {
            "a": [tool("messages", command="send", to="b", text="25?"), *[WAIT] * 4],
            "b": [WAIT, tool("messages", command="read"), *[WAIT] * 4],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "quiescence"
    assert waits(sample, "b")[0] == "news"
    reads = [e.data for e in comm(sample, "read") if e.data["member"] == "b"]  # type: ignore[index]
    assert [m["message"] for r in reads for m in r["messages"]] == ["m-1"]  # type: ignore[index]


@swarm_controller
def first_alone(settle: float = 0.2) -> Controller:
    """Start only the first member; stop when `quiescent()` is met."""
    stop = quiescent(settle)

    async def run(swarm: SwarmControl) -> StopReason:
        swarm.start(swarm.members[0])
        watch = stop.watch()
        async with aclosing(swarm.events(*stop.events())) as events:
            async for event in events:
                reason = await watch(swarm, event)
                if reason is not None:
                    return reason
        return "all_done"

    return Controller(run)


def test_an_unread_message_keeps_the_swarm_from_quiescence(backend: str, tmp_path: Path) -> None:
    # b never starts, so m-1 stays unread: each time a waits alone, the swarm is not quiet
    sample = run(
        swarm(
            [member(board_member, name=n) for n in ("a", "b")],
            controller=first_alone(),
            channels=[messages()],
        ),
        {"a": [tool("messages", command="send", to="b", text="25?"), WAIT, WAIT, {"submit": "25"}]},
        tmp_path,
    )
    assert stop_reason(sample) == "all_done"
    assert waits(sample, "a") == ["all_waiting", "all_waiting"]
