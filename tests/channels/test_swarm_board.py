"""The shared memory board in real swarm runs on the scripted model (asyncio and trio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from inspect_ai._util import logger as inspect_logger
from inspect_ai.agent import Agent, AgentState, agent, react
from inspect_ai.event import InfoEvent, LoggerEvent, ModelEvent, ToolEvent
from inspect_ai.log import EvalSample, read_eval_log, resolve_sample_attachments
from inspect_ai.tool import think

from inspect_swarm import (
    Budget,
    member,
    shared_memory,
    swarm,
    swarm_on_continue,
    swarm_react,
    swarm_tools,
)
from inspect_swarm._channels._board import appended, inserted

from ..runtime.helpers import (
    ALL_RUN,
    info_events,
    infos,
    metrics_member,
    run,
    run_log,
    statuses,
)
from .members import WAIT, F, board_member, comm, member_span, sm, spans


def board_swarm(**board: Any) -> Agent:
    """Members w-1 and w-2 on one board (`shared_memory(**board)`), each running to its end."""
    return swarm(
        member(board_member, name="w", count=2),
        controller=ALL_RUN,
        channels=[shared_memory(**board)],
    )


def model_calls(sample: EvalSample, span_ids: set[str]) -> int:
    """Completed model calls in these agent spans."""
    return len(
        {
            e.uuid
            for e in sample.events
            if isinstance(e, ModelEvent) and e.error is None and e.span_id in span_ids
        }
    )


def test_members_share_a_count_and_wait_for_each_other(backend: str, tmp_path: Path) -> None:
    sample = run(
        board_swarm(),
        {
            "w-1": [
                sm(command="append", path=f"{F}/parts", append_text="w-1: 20"),
                WAIT,
                sm(command="view", path=f"{F}/parts"),
                {"submit": "42"},
            ],
            "w-2": [
                {"text": "counting", "delay": 0.05},
                sm(command="append", path=f"{F}/parts", append_text="w-2: 22"),
                WAIT,
                {"submit": "42"},
            ],
        },
        tmp_path,
    )
    assert statuses(sample) == {"w-1": "submitted", "w-2": "submitted"}
    all_spans = spans(sample)
    loops = {"w-1": member_span(sample, "w-1"), "w-2": member_span(sample, "w-2")}
    for event in comm(sample):
        data = event.data
        assert isinstance(data, dict)
        if data["kind"] == "notified":
            assert event.span_id == loops[data["member"]]  # in the member's own loop
        else:
            assert all_spans[event.span_id or ""].type == "tool"  # in the tool call's span
        assert data["loop"] == loops[data["member"]] and data["nested"] is False
    waited = {e.data["member"]: e.data for e in comm(sample, "waited")}  # type: ignore[index]
    assert waited["w-1"]["outcome"] == "news"
    assert waited["w-1"]["files"][0]["writer"] == "w-2"
    # w-1's view shows both parts
    [view] = [
        e
        for e in sample.events
        if isinstance(e, ToolEvent) and e.arguments.get("command") == "view"
    ]
    assert "w-1: 20\n" in str(view.result) and "w-2: 22" in str(view.result)
    w1 = metrics_member(sample, "w-1")
    assert w1["comm"]["shared_memory"]["records"] == 1
    assert w1["comm"]["shared_memory"]["reads"] == 1
    assert w1["waits"] == 1 and w1["waits_by_outcome"] == {"news": 1}
    assert w1["wait_time"] >= 0.0 and w1["idle_time"] is not None


def test_notice_reaches_the_member_between_turns(backend: str, tmp_path: Path) -> None:
    log = run_log(
        board_swarm(),
        {
            "w-1": [
                sm(command="create", path=f"{F}/plan.md", file_text="the plan"),
                {"submit": "1"},
            ],
            "w-2": [
                {"text": "waiting for a plan", "after": {"w-1": 2}},
                sm(command="view", path="f-1"),
                {"submit": "2"},
            ],
        },
        tmp_path,
    )
    [sample] = read_eval_log(log.location, resolve_attachments=True).samples or []
    [notified] = [e.data for e in comm(sample, "notified")]
    assert notified["member"] == "w-2"  # type: ignore[index]
    assert notified["ids"] == {"files": [{"file": "f-1", "version": 1, "record": "w-1"}]}  # type: ignore[index]
    # the notice is in the conversation of w-2's next model call
    inputs = [
        m
        for e in sample.events
        if isinstance(e, ModelEvent) and e.span_id == member_span(sample, "w-2")
        for m in e.input
    ]
    notices = [m for m in inputs if m.role == "user" and m.text.startswith("[Swarm notice]")]
    assert notices and "(f-1 new; by w-1)" in notices[0].text and "the plan" not in notices[0].text
    assert notices[0].metadata["inspect_swarm"]["notice"] == notified["notice"]  # type: ignore[index]


def test_poll_members_get_no_notice_and_wiring_lists_unwired(backend: str, tmp_path: Path) -> None:
    script = {
        "writer": [sm(command="append", path=f"{F}/log", append_text="x"), {"submit": "1"}],
        "*": [{"text": "thinking", "delay": 0.1}, {"text": "still"}, {"submit": "2"}],
    }
    sample = run(
        swarm(
            [
                member(board_member, name="writer"),
                member(board_member, name="polling", delivery="poll"),
                member(board_member, args={"hook": "none"}, name="unhooked"),
                member(react, name="toolless"),
            ],
            controller=ALL_RUN,
            channels=[shared_memory()],
        ),
        script,
        tmp_path,
    )
    assert [e.data["member"] for e in comm(sample, "notified")] == []  # type: ignore[index]
    metrics = sample.store["inspect_swarm:metrics"]
    assert metrics["notify_unwired"] == ["unhooked", "toolless"]
    assert metrics["tools_unwired"] == ["toolless"]
    assert metrics_member(sample, "polling")["delivery_effective"] == "poll"
    assert metrics_member(sample, "toolless")["comm"]["shared_memory"]["records"] == 0


def test_members_that_miss_the_swarms_tools_or_notices_are_warned_once(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspect_logger, "_warned", [])  # the console warns once per process
    script = {"*": [{"text": "thinking"}, {"text": "still"}, {"text": "more"}, {"submit": "2"}]}
    sample = run(
        swarm(
            [
                member(board_member, name="wired"),
                member(board_member, args={"hook": "none"}, name="unhooked"),
                member(react, name="toolless"),
                member(react, name="polling", delivery="poll"),
            ],
            controller=ALL_RUN,
            channels=[shared_memory()],
        ),
        script,
        tmp_path,
    )
    sample = resolve_sample_attachments(sample)  # the long texts are attachments in the log
    wiring = [e.data for e in info_events(sample, "wiring") if isinstance(e.data, dict)]
    assert sorted((w["member"], w["missing"]) for w in wiring) == [
        ("polling", "swarm_tools"),
        ("toolless", "swarm_on_continue"),
        ("toolless", "swarm_tools"),
        ("unhooked", "swarm_on_continue"),
    ]
    for w in wiring:
        assert "member(swarm_react" in w["fix"] and "@agent def worker()" in w["fix"]
    toolless = next(w for w in wiring if (w["member"], w["missing"]) == ("toolless", "swarm_tools"))
    assert "without the tools of the swarm's channels (shared_memory)" in toolless["done"]
    # the console gets one short warning for each missing piece, naming no member
    warned = [
        # the logged message starts with the sample it came from
        e.message.message.splitlines()[-1]
        for e in sample.events
        if isinstance(e, LoggerEvent) and "inspect_swarm: members" in e.message.message
    ]
    assert len(warned) == 2 and all(len(m) < 250 and "\n" not in m for m in warned), warned
    assert any("swarm_tools() not wired" in m for m in warned)
    assert any("swarm_on_continue() not wired" in m for m in warned)
    # the records stay as the user guide has them
    metrics = sample.store["inspect_swarm:metrics"]
    assert (metrics["notify_unwired"], metrics["tools_unwired"]) == ([], ["toolless", "polling"])
    # and the summary names them
    [summary] = [
        e.data for e in sample.events
        if isinstance(e, InfoEvent) and e.source == "inspect_swarm:summary"
    ]  # fmt: skip
    assert "**Unwired**: toolless, polling got no channel tools (swarm_tools())" in str(summary)


def test_swarm_react_adds_the_board_to_the_members_tools_and_hook(
    backend: str, tmp_path: Path
) -> None:
    solver = swarm(
        member(swarm_react, {"tools": [think()], "on_continue": "Keep going."}, name="w", count=2),
        controller=ALL_RUN,
        channels=[shared_memory()],
    )
    log = run_log(
        solver,
        {
            "w-1": [
                sm(command="append", path=f"{F}/log", append_text="w-1 was here"),
                {"submit": "1"},
            ],
            "w-2": [
                {"text": "thinking", "after": {"w-1": 2}},
                {"tool": "think", "arguments": {"thought": "read the board"}},
                sm(command="view", path="f-1"),
                {"submit": "2"},
            ],
        },
        tmp_path,
    )
    [sample] = read_eval_log(log.location, resolve_attachments=True).samples or []
    assert statuses(sample) == {"w-1": "submitted", "w-2": "submitted"}
    w2 = [
        e
        for e in sample.events
        if isinstance(e, ModelEvent) and e.span_id == member_span(sample, "w-2")
    ]
    # its own tools, the board's, and react's submit
    for event in w2:
        assert {t.name for t in event.tools} == {"think", "shared_memory", "swarm_wait", "submit"}
    # after its turn without tool calls: the board's notice, then its own hook's message
    texts = [m.text for m in w2[1].input if m.role == "user"]
    assert texts[-2].startswith("[Swarm notice] 1 shared memory file changed")
    assert texts[-1] == "Keep going."
    assert [e.data["member"] for e in comm(sample, "read")] == ["w-2"]  # type: ignore[index]
    assert info_events(sample, "wiring") == []
    metrics = sample.store["inspect_swarm:metrics"]
    assert (metrics["notify_unwired"], metrics["tools_unwired"]) == ([], [])


def test_swarm_react_takes_reacts_arguments() -> None:
    # member() checks them against react()'s signature
    with pytest.raises(
        TypeError, match=r"args=\['tool'\] do not fit .*swarm_react\(name, .*tools,"
    ):
        member(swarm_react, args={"tool": []})
    with pytest.raises(ValueError, match=r"swarm_react\(on_continue=...\): on_continue='go'"):
        swarm_react(submit=False, on_continue="go")


def test_filesystem_only_records_no_communication(tmp_path: Path) -> None:
    sample = run(swarm(member(board_member, count=2)), {"*": [{"submit": "42"}]}, tmp_path)
    for m in sample.store["inspect_swarm:metrics"]["members"]:
        assert m["comm"] == {} and m["waits"] is None and m["idle_time"] is None
    assert not comm(sample)
    tools = next(e for e in sample.events if isinstance(e, ModelEvent)).tools
    assert [t.name for t in tools] == ["submit"]


def test_stop_releases_pending_waits(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(board_member, name="w", count=3),
            channels=[shared_memory(max_wait=60)],
            # long enough for w-2 and w-3 to reach their waits on a loaded machine
            budget=Budget(time=3, grace=0),
        ),
        {"w-1": [{"text": "working", "delay": 60}], "*": [sm(command="view", path=F), WAIT]},
        tmp_path,
    )
    outcomes = [e.data["outcome"] for e in comm(sample, "waited")]  # type: ignore[index]
    assert outcomes == ["stopping", "stopping"]
    [ledger] = infos(sample, "ledger")
    assert ledger["ledger"]["stop_reason"] == "swarm_time"


def test_every_member_waiting_ends_the_waits(backend: str, tmp_path: Path) -> None:
    sample = run(
        board_swarm(max_wait=60),
        {"*": [WAIT, {"submit": "done"}]},
        tmp_path,
    )
    outcomes = sorted(e.data["outcome"] for e in comm(sample, "waited"))  # type: ignore[index]
    assert outcomes == ["all_waiting", "all_waiting"]


def test_replaying_delivered_writes_rebuilds_the_board(tmp_path: Path) -> None:
    sample = run(
        board_swarm(),
        {
            "w-1": [
                sm(command="create", path=f"{F}/a", file_text="one\ntwo"),
                sm(command="insert", path=f"{F}/a", insert_line=1, insert_text="1.5"),
                sm(command="append", path=f"{F}/b", append_text="b"),
                {"submit": "x"},
            ],
            "w-2": [
                {"text": "later", "after": {"w-1": 4}},
                sm(command="str_replace", path=f"{F}/a", old_str="two", new_str="2"),
                sm(command="append", path=f"{F}/a", append_text="three"),
                sm(command="view", path=f"{F}/b"),
                sm(command="rename", old_path=f"{F}/b", new_path=f"{F}/c/b"),
                sm(command="view", path="f-1"),
                {"submit": "y"},
            ],
        },
        tmp_path,
    )
    sent = {e.data["record"]: e.data for e in comm(sample, "sent")}  # type: ignore[index]
    files: dict[str, str] = {}
    delivered = sorted((e.data for e in comm(sample, "delivered")), key=lambda d: d["seq"])  # type: ignore[index,return-value]
    assert [d["seq"] for d in delivered] == [1, 2, 3, 4, 5, 6]
    for d in delivered:
        payload, data = sent[d["record"]]["payload"], sent[d["record"]]["data"]
        [change] = d["files"]
        content = files.get(change["file"], "")
        if d["op"] == "create":
            content = payload
        elif d["op"] == "append":
            content = appended(content, payload)
        elif d["op"] == "insert":
            content = inserted(content, data["insert_line"], payload)
        elif d["op"] == "str_replace":
            content = content.replace(data["old_str"], payload, 1)
        files[change["file"]] = content
    [last_view] = [
        e for e in sample.events if isinstance(e, ToolEvent) and e.arguments.get("path") == "f-1"
    ]
    shown = "\n".join(
        line.split("\t", 1)[1] for line in str(last_view.result).splitlines() if "\t" in line
    )
    assert shown == files["f-1"] == "one\n1.5\n2\nthree"


@pytest.mark.parametrize(
    "variant",
    ["submit", "no_submit", "string", "function"],
)
def test_continuation_parity_for_react_variants(variant: str, tmp_path: Path) -> None:
    """With notices on, a member makes the same model calls and stops the same way."""

    async def keep_going(state: AgentState) -> bool | str | AgentState:
        return True

    def build(hooked: bool) -> Agent:
        inner: Any
        if variant == "submit":
            inner, kwargs = None, {}
        elif variant == "no_submit":
            inner, kwargs = None, {"submit": False}
        elif variant == "string":
            inner, kwargs = "Go on, then call {submit}.", {}
        else:
            inner, kwargs = keep_going, {}
        if hooked:
            hook = (
                swarm_on_continue(no_tool_calls="stop")
                if variant == "no_submit"
                else swarm_on_continue(inner)
            )
        else:
            hook = inner
        return react(tools=[swarm_tools()], on_continue=hook, **kwargs)

    script = {
        "writer": [
            sm(command="append", path=f"{F}/x", append_text="1"),
            sm(command="append", path=f"{F}/x", append_text="2"),
            {"submit": "w"},
        ],
        "m": [
            {**sm(command="view", path=F), "delay": 0.05},
            {"text": "first", "delay": 0.05},
            sm(command="view", path=F),
            {"text": "second", "delay": 0.05},
            {"submit": "m"},
        ],
    }
    runs = {}
    for hooked in (False, True):

        @agent(name=f"parity_{variant}_{hooked}")
        def built(hooked: bool = hooked) -> Agent:
            return build(hooked)

        sample = run(
            swarm(
                [member(board_member, name="writer"), member(built, name="m")],
                controller=ALL_RUN,
                channels=[shared_memory()],
            ),
            script,
            tmp_path / str(hooked),
        )
        runs[hooked] = (
            model_calls(sample, {member_span(sample, "m")}),
            statuses(sample)["m"],
            len(comm(sample, "notified")),
        )
    assert runs[True][:2] == runs[False][:2]
    assert runs[True][2] >= 1 and runs[False][2] == 0


def test_sentinel_rejects_a_write_before_it_reaches_the_board(tmp_path: Path) -> None:
    from .sentinel_protocol import no_secrets_on_board

    sample = run(
        swarm(
            member(board_member, name="w", count=1),
            channels=[shared_memory()],
        ),
        {
            "w": [
                sm(command="create", path=f"{F}/env", file_text="the api_key is 123"),
                sm(command="create", path=f"{F}/env", file_text="nothing secret"),
                {"submit": "ok"},
            ]
        },
        tmp_path,
        task_args={"sentinel": no_secrets_on_board()},
    )
    writes = [
        e for e in sample.events if isinstance(e, ToolEvent) and e.function == "shared_memory"
    ]
    assert writes[0].error is not None
    assert "Credentials may not be written to shared memory." in writes[0].error.message
    assert writes[1].error is None
    assert [e.data["payload"] for e in comm(sample, "sent")] == ["nothing secret"]  # type: ignore[index]
    assert infos(sample, "comm")
