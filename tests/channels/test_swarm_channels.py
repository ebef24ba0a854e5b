"""Messages, tasks and notes in real swarm runs on the scripted model (asyncio and trio)."""

from __future__ import annotations

from pathlib import Path

from inspect_ai.event import ModelEvent, ToolEvent
from inspect_ai.log import EvalSample, read_eval_log

from inspect_swarm import (
    leaderless,
    member,
    messages,
    notes,
    shared_memory,
    swarm,
    tasks,
)

from ..runtime.helpers import ALL_RUN, cli_eval, metrics_member, run, run_log, statuses
from .members import WAIT, board_member, comm, member_span, tool


def kinds(sample: EvalSample, channel: str) -> set[str]:
    return {e.data["kind"] for e in comm(sample) if e.data["channel"] == channel}  # type: ignore[index]


def results(sample: EvalSample, function: str) -> list[ToolEvent]:
    return [e for e in sample.events if isinstance(e, ToolEvent) and e.function == function]


def tool_spans(sample: EvalSample, name: str) -> set[str | None]:
    """The spans of the member's tool calls that left evidence (each event is in its call's)."""
    return {e.span_id for e in comm(sample) if e.data["member"] == name}  # type: ignore[index]


def test_a_lead_asks_the_reviewers_and_waits_for_their_replies(
    backend: str, tmp_path: Path
) -> None:
    ask = tool("messages", command="send", to="role:reviewer", text="Is it 42?")
    reviewer = [
        {"text": "reviewing", "delay": 0.2},
        tool("messages", command="read"),
        tool("messages", command="send", reply_to="m-1", text="Yes, 42."),
        # still running, so only a reply can end the lead's waits
        {"text": "resting", "delay": 1.0},
        {"submit": "42"},
    ]
    log = run_log(
        swarm(
            [
                member(board_member, name="lead", role="lead"),
                member(board_member, name="r", role="reviewer", count=2),
            ],
            controller=ALL_RUN,
            channels=[messages()],
        ),
        {
            "lead": [ask, *[WAIT, tool("messages", command="read")] * 2, {"submit": "42"}],
            "r-*": reviewer,
        },
        tmp_path,
    )
    [sample] = read_eval_log(log.location, resolve_attachments=True).samples or []
    assert statuses(sample) == {"lead": "submitted", "r-1": "submitted", "r-2": "submitted"}
    assert kinds(sample, "messages") == {"sent", "delivered", "read", "notified"}
    # each reviewer heard of the question between its turns, by sender and id, not its text
    for name in ("r-1", "r-2"):
        inputs = [
            m
            for e in sample.events
            if isinstance(e, ModelEvent) and e.span_id == member_span(sample, name)
            for m in e.input
        ]
        [notice] = {m.text for m in inputs if m.text.startswith("[Swarm notice]")}
        assert "1 new message for you (m-1 from lead)" in notice and "42?" not in notice
    # the lead's waits ended on the replies, which its reads show, each once, in their fences
    waited = [e.data for e in comm(sample, "waited") if e.data["member"] == "lead"]  # type: ignore[index]
    assert [w["outcome"] for w in waited] == ["news", "news"]
    shown = "".join(
        str(e.result)
        for e in results(sample, "messages")
        if e.arguments["command"] == "read" and e.span_id in tool_spans(sample, "lead")
    )
    assert shown.count("Yes, 42.") == 2 and shown.count('thread="m-1" reply_to="m-1">') == 2
    lead = metrics_member(sample, "lead")
    assert (lead["comm"]["messages"]["records"], lead["comm"]["messages"]["reads"]) == (1, 2)
    assert lead["waits_by_outcome"] == {"news": 2}
    assert metrics_member(sample, "r-1")["comm"]["messages"]["notices"] == 1


def test_two_members_claim_one_task_at_once_and_one_wins(backend: str, tmp_path: Path) -> None:
    claim = tool("tasks", command="claim", task="t-1")
    sample = run(
        swarm(
            [member(board_member, name="lead"), member(board_member, name="w", count=2)],
            controller=ALL_RUN,
            channels=[tasks()],
        ),
        {
            "lead": [
                tool("tasks", command="create", title="count the primes"),
                tool("tasks", command="create", title="sum", depends_on=["t-1"]),
                {"submit": "42"},
            ],
            # both claim once the tasks are there, both try the dependent task, then each tries
            # to finish the first
            "w-*": [
                {"text": "waiting for work", "after": {"lead": 3}},
                claim,
                tool("tasks", command="claim", task="t-2"),
                {
                    **tool(
                        "tasks", command="update", task="t-1", version=2, status="done", result="25"
                    ),
                    "after": {"w-1": 4, "w-2": 4},
                },
                {"submit": "42"},
            ],
        },
        tmp_path,
    )
    claims = [e for e in results(sample, "tasks") if e.arguments == claim["arguments"]]
    won = [e for e in claims if e.error is None]
    lost = [e for e in claims if e.error is not None]
    assert len(won) == 1 and len(lost) == 1
    assert str(won[0].result).startswith("Claimed t-1 (version 2, record k-")
    assert lost[0].error is not None and "Claim refused: t-1 is claimed by w-" in (
        lost[0].error.message
    )
    # t-2 waits on t-1 for both; only the winner's update lands
    deps = [e for e in results(sample, "tasks") if e.arguments.get("task") == "t-2" and e.error]
    assert len(deps) == 2 and all("depends on t-1 (claimed)" in e.error.message for e in deps)  # type: ignore[union-attr]
    updates = [e for e in results(sample, "tasks") if e.arguments["command"] == "update"]
    assert sorted(e.error is None for e in updates) == [False, True]
    delivered = [e.data for e in comm(sample, "delivered")]
    assert [(d["task"], d["status"]) for d in delivered] == [  # type: ignore[index]
        ("t-1", "open"),
        ("t-2", "open"),
        ("t-1", "claimed"),
        ("t-1", "done"),
    ]
    rejected = {m: metrics_member(sample, m)["comm"]["tasks"]["rejections"] for m in ("w-1", "w-2")}
    assert sorted(sum(r.values()) for r in rejected.values()) == [1, 3]
    assert kinds(sample, "tasks") >= {"sent", "delivered", "notified"}


def test_members_keep_and_search_notes(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            [member(board_member, name="a"), member(board_member, name="b")],
            controller=ALL_RUN,
            channels=[notes()],
        ),
        {
            "a": [
                tool("notes", command="add", kind="failed", text="Trial division timed out."),
                tool("notes", command="add", kind="fact", text="There are 25 primes below 100."),
                {"submit": "25"},
            ],
            "b": [
                WAIT,
                {"text": "a has more to say", "delay": 0.3},
                tool("notes", command="search", query="primes"),
                tool("notes", command="read"),
                {"submit": "25"},
            ],
        },
        tmp_path,
    )
    [search, read] = results(sample, "notes")[-2:]
    assert "e-2 [fact] by a" in str(search.result) and "e-1 [" not in str(search.result)
    assert "e-1 [failed] by a" in str(read.result) and "e-2 [" not in str(read.result)
    assert str(read.result).endswith("Notes: none new since you last read.")
    waited = [e.data for e in comm(sample, "waited")]
    assert waited[0]["outcome"] == "news"  # type: ignore[index]
    assert kinds(sample, "notes") >= {"sent", "delivered", "read"}
    assert metrics_member(sample, "a")["comm"]["notes"]["records"] == 2
    assert metrics_member(sample, "b")["comm"]["notes"]["reads"] == 2


def test_a_message_sent_as_the_swarm_stops_is_delivered_or_refused_whole(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            [member(board_member, name=n) for n in ("a", "b", "c")],
            controller=leaderless(),
            channels=[messages()],
        ),
        {
            "a": [{"submit": "42", "delay": 0.3}],
            "b": [
                {**tool("messages", command="send", to="c", text="now"), "delay": 0.3},
                {"submit": "41"},
            ],
            "c": [{"text": "busy", "delay": 1.0}, {"submit": "40"}],
        },
        tmp_path,
    )
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "submitted"
    [sent] = [e.data for e in comm(sample, "sent")]
    delivered = [e.data for e in comm(sample, "delivered")]
    [call] = results(sample, "messages")
    records = metrics_member(sample, "b")["comm"]["messages"]
    if sent["refused"] is None:  # type: ignore[index]
        assert [d["record"] for d in delivered] == ["m-1"] and call.error is None  # type: ignore[index]
        assert records["records"] == 1 and records["rejections"] == {}
    else:
        assert sent["refused"]["control"] == "stopping" and delivered == []  # type: ignore[index]
        assert call.error is not None and "the swarm is stopping" in call.error.message
        assert records["records"] == 0 and records["rejections"] == {"stopping": 1}


def test_every_channel_in_one_swarm_counts_its_own_traffic(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(board_member, name="w", count=2),
            controller=ALL_RUN,
            channels=[shared_memory(), messages(), tasks(), notes()],
        ),
        {
            "w-1": [
                tool("messages", command="send", to="w-2", text="hi"),
                tool("tasks", command="create", title="job"),
                tool("notes", command="add", kind="attempt", text="trying"),
                tool("shared_memory", command="append", path="/shared_memory/log", append_text="x"),
                {"submit": "42"},
            ],
            "w-2": [{"text": "later", "after": {"w-1": 5}}, WAIT, {"submit": "42"}],
        },
        tmp_path,
    )
    # w-1 wrote once on each channel, and w-2's notice had one line for each
    every = dict.fromkeys(["shared_memory", "messages", "tasks", "notes"], 1)
    w1, w2 = (metrics_member(sample, m)["comm"] for m in ("w-1", "w-2"))
    assert {c: (w1[c]["records"], w2[c]["notices"]) for c in w1} == {c: (1, 1) for c in every}
    [wait] = [e.data for e in comm(sample, "waited")]
    assert wait["outcome"] == "news" and len(wait["files"]) == 4  # type: ignore[index]


MESSAGES_SCRIPT = """
members:
  swarm_react-1:
    - {tool: messages, arguments: {command: send, to: swarm_react-2, text: "Is it 42?"}}
    - {tool: swarm_wait, arguments: {}}
    - {tool: messages, arguments: {command: read}}
    - {submit: "42"}
  swarm_react-2:
    - {tool: swarm_wait, arguments: {}}
    - {tool: messages, arguments: {command: read}}
    - {tool: messages, arguments: {command: send, reply_to: m-1, text: "It is."}}
    - {text: "Done.", delay: 1.0}
    - {submit: "42"}
"""


def test_the_command_line_names_the_channel(tmp_path: Path) -> None:
    (tmp_path / "messages.yaml").write_text(MESSAGES_SCRIPT)
    log = cli_eval(
        tmp_path / "messages.yaml",
        tmp_path / "logs",
        "members={factory: swarm_react, count: 2}",
        "channels=messages",
    )
    assert log.samples
    assert log.eval.solver_args is not None and log.eval.solver_args["channels"] == "messages"
    sample = log.samples[0]
    offered = [{t.name for t in e.tools} for e in sample.events if isinstance(e, ModelEvent)]
    assert offered and all(tools == {"messages", "swarm_wait", "submit"} for tools in offered)
    delivered = [e.data for e in comm(sample, "delivered")]
    assert [(d["member"], d["recipients"], d["thread"]) for d in delivered] == [  # type: ignore[index]
        ("swarm_react-1", ["swarm_react-2"], "m-1"),
        ("swarm_react-2", ["swarm_react-1"], "m-1"),
    ]
    assert sample.output.completion == "42"
