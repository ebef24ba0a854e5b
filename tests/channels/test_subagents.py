"""A member's subagents on the board, in real swarm runs of deepagent members (asyncio and trio).

deepagent's `general()` subagents inherit the member's `swarm_tools()`, so they get the
`shared_memory` and `swarm_wait` tools and act as the member. The scripted model gives a
synchronous subagent's calls the member's next steps, and a background subagent's calls the
steps of `<member>/general`, counted for each run, so every interleaving runs the same script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from inspect_ai.agent import Agent, agent, as_tool, deepagent, general, react
from inspect_ai.event import ModelEvent, SpanBeginEvent, ToolEvent
from inspect_ai.log import EvalSample, read_eval_log
from inspect_ai.util import token_limit

from inspect_swarm import Budget, member, shared_memory, swarm, swarm_on_continue, swarm_tools

from ..runtime.helpers import ALL_RUN, infos, ledger_member, metrics_member, run_log, statuses
from .members import WAIT, F, board_member, sm

PLAN = f"{F}/plan"
SUBAGENT_TOOLS = {"shared_memory", "swarm_wait"}


@agent
def deep(background: bool = False) -> Agent:
    """A deepagent member whose `general()` subagent inherits its `swarm_tools()`."""
    return deepagent(
        tools=[swarm_tools()],
        subagents=[general()],
        memory=False,
        todo_write=False,
        compaction=None,  # "auto" counts tokens with tiktoken, which downloads its vocabulary
        background=background,
        on_continue=swarm_on_continue(),
    )


@agent
def manager() -> Agent:
    """A react member that runs a nested react loop, given `swarm_tools()`, as a tool."""
    helper = react(
        name="helper",
        description="Adds a note to the board.",
        tools=[swarm_tools()],
        on_continue=swarm_on_continue(),
    )
    return react(tools=[swarm_tools(), as_tool(helper)], on_continue=swarm_on_continue())


def dispatch(prompt: str, *, background: bool = False) -> dict[str, Any]:
    arguments: dict[str, Any] = {"prompt": prompt}
    if background:
        arguments["background"] = True
    return {"tool": "agent", "arguments": arguments}


def agent_wait(*agent_ids: str) -> dict[str, Any]:
    return {"tool": "agent_wait", "arguments": {"agent_ids": list(agent_ids)}}


def run_swarm(solver: Agent, members: dict[str, Any], tmp_path: Path) -> EvalSample:
    """Run one sample; return it read back from the log with its attachments resolved, and
    with every model call's request (which names the scripted model's route and step)."""
    log = run_log(solver, members, tmp_path, log_model_api=True)
    [sample] = read_eval_log(log.location, resolve_attachments=True).samples or []
    return sample


def agent_spans(sample: EvalSample, name: str) -> list[str]:
    """The ids of the agent spans (loops) of this name, in the order they began."""
    return [
        e.id
        for e in sample.events
        if isinstance(e, SpanBeginEvent) and e.type == "agent" and e.name == name
    ]


def calls_in(sample: EvalSample, loop: str) -> list[ModelEvent]:
    """The completed model calls made in one loop."""
    return [
        e
        for e in sample.events
        if isinstance(e, ModelEvent) and e.error is None and e.span_id == loop and not e.pending
    ]


def tools_in(sample: EvalSample, loop: str) -> list[ToolEvent]:
    return [e for e in sample.events if isinstance(e, ToolEvent) and e.span_id == loop]


def offered(calls: list[ModelEvent]) -> list[set[str]]:
    """The board's tools offered to each of these calls."""
    return [{t.name for t in e.tools} & SUBAGENT_TOOLS for e in calls]


def evidence(sample: EvalSample, kind: str | None = None) -> list[dict[str, Any]]:
    return [d for d in infos(sample, "comm") if kind is None or d["kind"] == kind]


def test_synchronous_subagent_reads_and_writes_the_board_as_the_member(
    backend: str, tmp_path: Path
) -> None:
    sample = run_swarm(
        swarm(member(deep, name="d"), channels=[shared_memory()]),
        {
            "d": [
                sm(command="append", path=PLAN, append_text="own: plan"),
                dispatch("Revise the plan."),
                # the subagent's calls take the member's next steps
                sm(command="create", path=PLAN, file_text="sub: plan"),
                sm(command="view", path="f-1"),
                sm(command="create", path=PLAN, file_text="sub: revised plan"),
                {"submit": "revised"},
                # the member's own loop again
                WAIT,
                sm(command="view", path="f-1"),
                {"submit": "42"},
            ]
        },
        tmp_path,
    )
    assert statuses(sample) == {"d": "submitted"}
    [own], [sub] = agent_spans(sample, "d"), agent_spans(sample, "general")

    # the general() subagent got the board's tools from the member's swarm_tools()
    assert offered(calls_in(sample, sub)) == [SUBAGENT_TOOLS] * 4

    # every write and read is the member's; the evidence names the loop and marks the nested one
    acts = [(d["kind"], d["loop"], d["nested"]) for d in evidence(sample)]
    assert acts == [
        ("sent", own, False),
        ("delivered", own, False),
        ("sent", sub, True),  # refused by the seen rule
        ("read", sub, True),
        ("sent", sub, True),
        ("delivered", sub, True),
        ("notified", own, False),
        ("waited", own, False),
        ("read", own, False),
    ]
    assert {d["member"] for d in evidence(sample)} == {"d"}

    # each loop has its own view: the subagent had not seen the member's own write
    refused = evidence(sample, "sent")[1]
    assert refused["refused"]["control"] == "seen"
    assert "last written by d" in refused["refused"]["message"]
    first = tools_in(sample, sub)[0]
    assert first.error is not None
    assert first.error.message.endswith(
        "Shared memory: 1 file changed since you last viewed it (f-1)."
    )

    # the subagent's write is news to the member's own wait, and the file names the member
    [waited] = evidence(sample, "waited")
    assert waited["outcome"] == "news"
    assert waited["files"] == [{"file": "f-1", "version": 2, "record": "w-3", "writer": "d"}]
    view = str(tools_in(sample, own)[-2].result)
    assert 'version="2" writer="d"' in view and "sub: revised plan" in view

    d = metrics_member(sample, "d")
    assert d["comm"]["shared_memory"] == {
        "records": 2,
        "record_bytes": len("own: plan") + len("sub: revised plan"),
        "rejections": {"seen": 1},
        "reads": 2,
        "listings": 0,
        "notices": 1,
    }
    assert (d["waits"], d["waits_by_outcome"]) == (1, {"news": 1})

    # the subagent's calls are the member's: steps, tokens and cost
    assert (len(calls_in(sample, own)), len(calls_in(sample, sub))) == (5, 4)
    assert (d["steps"], d["tokens"]) == (9, 9 * 110)
    assert d["cost"] == pytest.approx(9 * 0.002)
    assert ledger_member(sample, "d")["calls"]["calls"] == 9
    metrics = sample.store["inspect_swarm:metrics"]
    assert (metrics["steps_to_answer"], metrics["longest_member_steps"]) == (9, 9)


def test_a_member_waits_for_its_background_subagent(backend: str, tmp_path: Path) -> None:
    sample = run_swarm(
        swarm(member(deep, {"background": True}, name="d"), channels=[shared_memory()]),
        {
            "d": [
                dispatch("Report your progress.", background=True),
                WAIT,
                sm(command="view", path="f-1"),
                agent_wait("AGENT-1"),
                {"submit": "42"},
            ],
            "d/general": [
                sm(command="append", path=f"{F}/progress", append_text="half done"),
                {"submit": "done"},
            ],
        },
        tmp_path,
    )
    assert sample.error is None
    assert statuses(sample) == {"d": "submitted"}
    [own], [sub] = agent_spans(sample, "d"), agent_spans(sample, "general")
    assert offered(calls_in(sample, sub)) == [SUBAGENT_TOOLS] * 2
    assert [e.call.request["route"] for e in calls_in(sample, sub) if e.call] == ["d/general"] * 2

    [delivered] = evidence(sample, "delivered")
    assert (delivered["member"], delivered["loop"], delivered["nested"]) == ("d", sub, True)
    # whether the write landed before or during the wait, it is the wait's news
    [waited] = evidence(sample, "waited")
    assert (waited["loop"], waited["nested"], waited["outcome"]) == (own, False, "news")
    assert waited["files"] == [{"file": "f-1", "version": 1, "record": "w-1", "writer": "d"}]

    # the background subagent is the member's, and its work kept the member from being idle
    ledger = ledger_member(sample, "d")
    assert (ledger["background_started"], ledger["background_cancelled"]) == (1, 0)
    assert ledger["calls"]["calls"] == 7
    d = metrics_member(sample, "d")
    assert (d["steps"], d["tokens"]) == (7, 7 * 110)
    assert d["comm"]["shared_memory"]["records"] == 1
    assert d["idle_time"] == 0.0


def test_a_member_waiting_in_its_own_loop_and_its_background_subagent_is_waiting(
    backend: str, tmp_path: Path
) -> None:
    # the only member: once both of its loops wait, every member is waiting
    wait = {"tool": "swarm_wait", "arguments": {"timeout": 60}}
    sample = run_swarm(
        swarm(member(deep, {"background": True}, name="d"), channels=[shared_memory()]),
        {
            "d": [
                dispatch("Wait for news.", background=True),
                wait,
                agent_wait("AGENT-1"),
                {"submit": "42"},
            ],
            "d/general": [wait, {"submit": "done"}],
        },
        tmp_path,
    )
    assert statuses(sample) == {"d": "submitted"}
    [own], [sub] = agent_spans(sample, "d"), agent_spans(sample, "general")
    waits = {(w["loop"], w["nested"], w["outcome"]) for w in evidence(sample, "waited")}
    assert waits == {(own, False, "all_waiting"), (sub, True, "all_waiting")}


def test_a_subagent_wait_counts_in_wait_time_but_not_idle_time(
    backend: str, tmp_path: Path
) -> None:
    sample = run_swarm(
        swarm(
            [member(deep, name="d"), member(board_member, name="w")],
            controller=ALL_RUN,
            channels=[shared_memory()],
        ),
        {
            "d": [
                dispatch("Wait a second."),
                {"tool": "swarm_wait", "arguments": {"timeout": 1}},
                {"submit": "waited"},
                WAIT,  # the member's own loop, until w ends
                {"submit": "42"},
            ],
            "w": [{"text": "working", "delay": 1.6}, {"submit": "w"}],
        },
        tmp_path,
    )
    assert statuses(sample) == {"d": "submitted", "w": "submitted"}
    [own], [sub] = agent_spans(sample, "d"), agent_spans(sample, "general")
    sub_wait, own_wait = evidence(sample, "waited")
    assert (sub_wait["loop"], sub_wait["nested"], sub_wait["outcome"]) == (sub, True, "timeout")
    assert (own_wait["loop"], own_wait["nested"], own_wait["outcome"]) == (own, False, "news")
    assert own_wait["ended"] == [{"member": "w", "status": "submitted"}]
    assert sub_wait["seconds"] >= 1.0

    d = metrics_member(sample, "d")
    assert (d["waits"], d["waits_by_outcome"]) == (2, {"timeout": 1, "news": 1})
    assert d["wait_time"] == pytest.approx(sub_wait["seconds"] + own_wait["seconds"], abs=1e-5)
    # idle time is the own loop's wait only
    assert d["idle_time"] == pytest.approx(own_wait["seconds"], abs=0.05)
    assert d["wait_time"] - d["idle_time"] >= 0.95


def test_subagents_share_the_members_write_rate(backend: str, tmp_path: Path) -> None:
    sample = run_swarm(
        swarm(member(deep, name="d"), channels=[shared_memory(rate=(2, 60.0))]),
        {
            "d": [
                sm(command="append", path=f"{F}/log", append_text="own"),
                dispatch("Log twice."),
                sm(command="append", path=f"{F}/log", append_text="sub 1"),
                sm(command="append", path=f"{F}/log", append_text="sub 2"),
                {"submit": "logged"},
                {"submit": "42"},
            ]
        },
        tmp_path,
    )
    [sub] = agent_spans(sample, "general")
    assert [(d["loop"] == sub, d["refused"]) for d in evidence(sample, "sent")][:2] == [
        (False, None),
        (True, None),
    ]
    refused = evidence(sample, "sent")[2]
    assert (refused["loop"], refused["nested"], refused["refused"]["control"]) == (
        sub,
        True,
        "rate",
    )
    error = tools_in(sample, sub)[1].error
    assert error is not None
    assert "rate limit of 2 writes per 60 seconds reached for this member and its subagents" in (
        error.message
    )
    comm = metrics_member(sample, "d")["comm"]["shared_memory"]
    assert (comm["records"], comm["rejections"]) == (2, {"rate": 1})


def test_a_nested_loop_given_swarm_tools_gets_no_notices(backend: str, tmp_path: Path) -> None:
    sample = run_swarm(
        swarm(member(manager, name="m"), channels=[shared_memory()]),
        {
            "m": [
                sm(command="append", path=f"{F}/own", append_text="from the member"),
                {"tool": "helper", "arguments": {"input": "Add your note."}},
                # the nested loop, whose turn boundaries run swarm_on_continue()
                sm(command="append", path=f"{F}/helper", append_text="from the helper"),
                {"submit": "noted"},
                # the member's own loop again
                {"submit": "42"},
            ]
        },
        tmp_path,
    )
    assert statuses(sample) == {"m": "submitted"}
    [own], [helper] = agent_spans(sample, "m"), agent_spans(sample, "helper")
    assert offered(calls_in(sample, helper)) == [SUBAGENT_TOOLS] * 2
    assert [(d["loop"], d["nested"]) for d in evidence(sample, "delivered")] == [
        (own, False),
        (helper, True),
    ]

    # the nested loop learns of the member's write from the status line, not a notice
    [write] = tools_in(sample, helper)[:1]
    assert str(write.result).endswith(
        "Shared memory: 1 file changed since you last viewed it (f-1)."
    )
    [notified] = evidence(sample, "notified")
    assert (notified["loop"], notified["nested"]) == (own, False)
    assert notified["ids"] == {"files": [{"file": "f-2", "version": 1, "record": "w-2"}]}

    def notices(loop: str) -> list[str]:
        return [
            m.text
            for e in calls_in(sample, loop)
            for m in e.input
            if m.role == "user" and m.text.startswith("[Swarm notice]")
        ]

    assert notices(helper) == []
    assert len(set(notices(own))) == 1 and "(f-2 new; by m)" in notices(own)[0]
    metrics = sample.store["inspect_swarm:metrics"]
    assert metrics_member(sample, "m")["comm"]["shared_memory"]["notices"] == 1
    assert (metrics["notify_unwired"], metrics["tools_unwired"]) == ([], [])


@pytest.mark.parametrize("spent", ["limit", "share"])
def test_background_subagents_spend_the_members_limits_and_share(
    spent: str, backend: str, tmp_path: Path
) -> None:
    # the member's own loop makes three calls (330 tokens), under its limit of 450 tokens and
    # its share of 500: only with its background subagent's five calls does it reach them
    bg = {"background": True}
    if spent == "limit":
        members = [member(deep, bg, name="d", limits=[token_limit(450)])]
        budget = Budget()
    else:
        members = [member(deep, bg, name="d"), member(board_member, name="w")]
        budget = Budget(tokens=1000, split="equal")
    sample = run_swarm(
        swarm(members, controller=ALL_RUN, channels=[shared_memory()], budget=budget),
        {
            "d": [
                dispatch("Think it over.", background=True),
                agent_wait("AGENT-1"),
                {"submit": "42"},
            ],
            "d/general": ["one", "two", "three", "four", {"submit": "thought"}],
            "w": [{"submit": "w"}],
        },
        tmp_path,
    )
    assert sample.error is None
    assert statuses(sample)["d"] == ("member_limit:token" if spent == "limit" else "share")
    [own] = agent_spans(sample, "d")
    assert len(calls_in(sample, own)) <= 3
    ledger = ledger_member(sample, "d")
    assert ledger["background_started"] == 1
    assert ledger["meter"]["usage"]["total_tokens"] == ledger["calls"]["calls"] * 110 > 450


def test_concurrent_background_subagents_each_run_their_own_steps(
    backend: str, tmp_path: Path
) -> None:
    sample = run_swarm(
        swarm(member(deep, {"background": True}, name="d"), channels=[shared_memory()]),
        {
            "d": [
                dispatch("Log a line.", background=True),
                dispatch("Log a line.", background=True),
                agent_wait("AGENT-1", "AGENT-2"),
                sm(command="view", path="f-1"),
                {"submit": "42"},
            ],
            "*/general": [
                sm(command="append", path=f"{F}/log", append_text="a line"),
                {"submit": "logged"},
            ],
        },
        tmp_path,
    )
    assert statuses(sample) == {"d": "submitted"}
    runs = agent_spans(sample, "general")
    assert len(runs) == 2
    # each run of the loop starts at its first step, however the two interleave
    for loop in runs:
        calls = calls_in(sample, loop)
        assert [(e.call.request["route"], e.call.request["step"]) for e in calls if e.call] == [
            ("d/general", 1),
            ("d/general", 2),
        ]
    delivered = evidence(sample, "delivered")
    assert sorted(d["loop"] for d in delivered) == sorted(runs)
    assert {(d["member"], d["nested"]) for d in delivered} == {("d", True)}
    assert str(tools_in(sample, agent_spans(sample, "d")[0])[-2].result).count("a line") == 2
    ledger = ledger_member(sample, "d")
    assert (ledger["background_started"], ledger["calls"]["calls"]) == (2, 9)


def test_a_loop_that_runs_out_of_steps_is_named(tmp_path: Path) -> None:
    sample = run_swarm(
        swarm(member(deep, name="d"), channels=[]),
        {"d": [dispatch("Work."), {"submit": "42"}], "d/general": []},
        tmp_path,
    )
    assert sample.error is not None
    assert "A run of loop 'd/general' in sample 1 (epoch 1) ran out of the 0 steps" in (
        sample.error.message
    )


def test_the_call_that_reaches_a_member_limit_is_the_members(backend: str, tmp_path: Path) -> None:
    # inspect raises the limit error before its usage hook, so the swarm meters the call from
    # its event
    sample = run_swarm(
        swarm(
            member(deep, {"background": True}, name="d", limits=[token_limit(300)]),
            channels=[shared_memory()],
        ),
        {
            "d": [dispatch("Think it over.", background=True), agent_wait("AGENT-1")],
            "d/general": ["one", "two", "three"],
        },
        tmp_path,
    )
    assert statuses(sample) == {"d": "member_limit:token"}
    ledger = sample.store["inspect_swarm:ledger"]
    [d] = ledger["members"]
    calls = d["calls"]["calls"]
    assert calls >= 3
    assert d["meter"]["usage"]["total_tokens"] == calls * 110
    assert d["meter"]["cost"] == pytest.approx(calls * 0.002)
    assert metrics_member(sample, "d")["tokens"] == calls * 110
    assert ledger["swarm"]["usage"]["total_tokens"] == calls * 110
    assert ledger["unattributed"]["total_tokens"] == 0
