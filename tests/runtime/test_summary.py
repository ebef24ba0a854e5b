"""What a person sees of a swarm: the summary in Markdown when it ends, the words that end each
member's timeline, the stop event, and the console's warning at a cap or share."""

import subprocess
import sys
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai._util import logger as inspect_logger
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.event import Event, EventTreeSpan, InfoEvent, LoggerEvent, event_tree
from inspect_ai.log import EvalSample, resolve_sample_attachments
from inspect_ai.scorer import includes
from inspect_ai.util import token_limit

from inspect_swarm import (
    Budget,
    Controller,
    StopReason,
    SwarmControl,
    member,
    swarm,
    swarm_controller,
)
from inspect_swarm.scripted import scripted_model

from .helpers import infos, run, run_log
from .test_statuses import SLOW, broken

ROOT = Path(__file__).parents[2]


def resolved(sample: EvalSample) -> EvalSample:
    # long strings are kept as attachments in the log; the viewer shows them resolved
    return resolve_sample_attachments(sample)


def summaries(sample: EvalSample) -> list[str]:
    return [
        e.data
        for e in sample.events
        if isinstance(e, InfoEvent) and e.source == "inspect_swarm:summary"
        and isinstance(e.data, str)
    ]  # fmt: skip


def member_span(sample: EvalSample, name: str) -> EventTreeSpan:
    found: list[EventTreeSpan] = []

    def walk(nodes: list[Any]) -> None:
        for node in nodes:
            if isinstance(node, EventTreeSpan):
                if node.type == "agent" and node.name == name:
                    found.append(node)
                walk(node.children)

    walk(event_tree(sample.events))
    [span] = found
    return span


def last_word(sample: EvalSample, name: str) -> str:
    """The last event of the member's own timeline, which must be its end in words."""
    last: Event = member_span(sample, name).children[-1]
    assert isinstance(last, InfoEvent) and last.source == "inspect_swarm:ended", last
    assert isinstance(last.data, str)
    return last.data


def table_rows(summary: str) -> dict[str, list[str]]:
    """The members table of the summary (an indented code block), by member."""
    header, *body = [line.split() for line in summary.splitlines() if line.startswith("    ")]
    assert header == [
        "member", "status", "time", "steps", "tokens", "cost", "submissions", "sent", "read",
        "waits",
    ]  # fmt: skip
    # the time is two words ("0.2 s")
    return {cells[0]: [*cells[:2], " ".join(cells[2:4]), *cells[4:]] for cells in body}


def warnings(sample: EvalSample) -> list[str]:
    return [
        e.message.message
        for e in sample.events
        if isinstance(e, LoggerEvent) and e.message.level == "warning"
    ]


def test_each_member_ends_its_timeline_in_words(backend: str, tmp_path: Path) -> None:
    sample = resolved(
        run(
            swarm(
                [
                    member(react, name="fast"),
                    member(react, name="slow"),
                    member(react, name="stuck"),
                    member(react, name="terse"),
                    member(react, name="small", limits=[token_limit(150)]),
                ],
                channels=[],
                budget=Budget(grace=2.0),
            ),
            {
                "fast": ["x", {"submit": "1024"}],
                # still in its first call when fast submits: its next call is refused
                "slow": [{"text": "y", "delay": 1.0}, "z", "z", "z"],
                "stuck": [{"text": "slow", "delay": 30}],
                "terse": [{"text": "long", "stop_reason": "model_length"}],
                "small": ["a", "b", "c"],
            },
            tmp_path,
        )
    )
    assert last_word(sample, "fast") == "**fast** submitted 1024"
    assert last_word(sample, "slow") == (
        "**slow** stopped by the swarm: fast submitted first (grace 2 s)"
    )
    assert last_word(sample, "stuck") == (
        "**stuck** cancelled after the grace period (2 s): fast submitted first"
    )
    assert last_word(sample, "terse") == (
        "**terse** ended without submitting (the model stopped: model_length)"
    )
    small = last_word(sample, "small")
    assert small.startswith("**small** reached its own token limit (") and "150" in small

    # the stop is logged once, in the swarm's own span, when it begins
    [stop] = infos(sample, "stop")
    assert (stop["reason"], stop["grace"]) == ("submitted", 2.0)
    fast_end = next(m["time"] for m in sample.store["inspect_swarm:result"]["members"])
    assert stop["time"] >= fast_end - 0.05

    [summary] = summaries(sample)
    assert "**Swarm answer**: `1024` from fast (the first submission)" in summary
    assert "**Stopped**: fast submitted first" in summary
    rows = table_rows(summary)
    assert {name: row[1] for name, row in rows.items()} == {
        "fast": "submitted",
        "slow": "stopped",
        "stuck": "cancelled",
        "terse": "unsubmitted",
        "small": "member_limit:token",
    }
    metrics = {m["name"]: m for m in sample.store["inspect_swarm:metrics"]["members"]}
    for name, row in rows.items():
        assert row[3:5] == [f"{metrics[name]['steps']:,}", f"{metrics[name]['tokens']:,}"]
    assert [rows[n][6] for n in rows] == ["1", "0", "0", "0", "0"]  # submissions
    assert warnings(sample) == []  # no cap or share: nothing to warn of


def swarm_span(sample: EvalSample) -> EventTreeSpan:
    """The span the swarm runs in: the one that holds the members' spans."""
    found: list[EventTreeSpan] = []

    def walk(nodes: list[Any]) -> None:
        for node in nodes:
            if isinstance(node, EventTreeSpan):
                if any(
                    isinstance(c, EventTreeSpan) and c.type == "agent" and c.name == "react-1"
                    for c in node.children
                ):
                    found.append(node)
                walk(node.children)

    walk(event_tree(sample.events))
    [span] = found
    return span


def test_the_summary_comes_first_and_the_records_after_the_members(
    backend: str, tmp_path: Path
) -> None:
    sample = resolved(
        run(
            swarm(member(react, count=2), channels=[]),
            {"react-1": [{"submit": "42"}], "react-2": SLOW * 5},
            tmp_path,
        )
    )
    children = swarm_span(sample).children
    # a person opening the sample reads the summary before any lane or raw record
    first = children[0]
    assert isinstance(first, InfoEvent) and first.source == "inspect_swarm:summary", first
    assert not first.pending
    assert isinstance(first.data, str) and first.data.startswith("**Swarm answer**: `42`")
    assert summaries(sample) == [first.data]
    order = [
        e.data["type"] if e.source == "inspect_swarm" else e.source  # type: ignore[index]
        for e in children[1:]
        if isinstance(e, InfoEvent) and (e.source or "").startswith("inspect_swarm")
    ]  # fmt: skip
    # every record is still logged, in the order the swarm settles them
    assert order[-4:] == ["result", "submissions", "ledger", "metrics"], order
    assert "inspect_swarm:summary" not in order


def test_a_share_is_said_in_the_timeline_the_summary_and_the_console(
    backend: str, tmp_path: Path
) -> None:
    sample = resolved(
        run(
            swarm(
                [member(react, name="greedy"), member(react, name="calm")],
                channels=[],
                budget=Budget(tokens=1000, split=(1, 4)),
            ),
            {"greedy": ["a", "b", "c"], "calm": [{"text": "x", "delay": 0.3}, {"submit": "42"}]},
            tmp_path,
        )
    )
    said = "reached its token share (200): 220 used"
    assert last_word(sample, "greedy") == f"**greedy** {said}"
    [summary] = summaries(sample)
    assert f"**Caps and shares reached**: greedy {said}" in summary
    [warning] = warnings(sample)
    assert warning.endswith(f"inspect_swarm: sample 1 (epoch 1): greedy {said}.")


def test_a_cap_is_said_in_every_member_and_the_summary(backend: str, tmp_path: Path) -> None:
    sample = resolved(
        run(
            swarm(
                [member(react, name="a"), member(react, name="b")],
                channels=[],
                budget=Budget(tokens=300, grace=0.2),
            ),
            {"a": ["1", "2", "3", "4"], "b": [{"text": "x", "delay": 30}]},
            tmp_path,
        )
    )
    cap = "the swarm's token cap (300) was reached by a's call: 330 used"
    assert last_word(sample, "a") == "**a** its call reached the swarm's token cap (300): 330 used"
    assert last_word(sample, "b") == f"**b** cancelled after the grace period (0.2 s): {cap}"
    [summary] = summaries(sample)
    assert f"**Stopped**: {cap}" in summary
    assert "**Caps and shares reached**" not in summary  # the stop already says it
    [warning] = warnings(sample)
    assert warning.endswith(f"inspect_swarm: sample 1 (epoch 1): {cap}.")
    [stop] = infos(sample, "stop")
    assert stop["reason"] == "swarm_cap"
    # logged in the swarm's span, though a's call began the stop
    [stop_event] = [e for e in sample.events if isinstance(e, InfoEvent) and e.data is stop]
    assert stop_event.span_id == member_span(sample, "a").parent_id


def test_an_error_and_a_sample_limit_end_timelines_in_words(backend: str, tmp_path: Path) -> None:
    log = run_log(
        swarm([member(broken), member(react)], channels=[]), {"*": SLOW * 10}, tmp_path / "e"
    )
    assert log.samples
    errored = resolved(log.samples[0])
    assert last_word(errored, "broken") == "**broken** errored: RuntimeError: the agent broke"
    assert (
        last_word(errored, "react") == "**react** cancelled: broken errored, which ended the swarm"
    )
    [summary] = summaries(errored)
    assert "**Stopped**: broken errored, which ended the swarm" in summary

    limited = resolved(
        run(
            swarm(member(react, count=2), channels=[]),
            {"*": SLOW * 20},
            tmp_path / "l",
            token_limit=500,
        )
    )
    assert last_word(limited, "react-1") == (
        "**react-1** cancelled: the sample's token limit was reached"
    )
    [summary] = summaries(limited)
    assert "**Stopped**: the sample's token limit was reached" in summary


CAPPED_TASK = """
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes

from inspect_swarm import Budget, member, swarm


@task
def capped() -> Task:
    return Task(
        dataset=[Sample(input="What is 6 times 7?", target="42", id="q1")],
        solver=swarm(member(react, count=2), channels=[], budget=Budget(tokens=300)),
        scorer=includes(),
    )
"""


def test_inspect_eval_prints_the_cap_at_the_console(tmp_path: Path) -> None:
    (tmp_path / "capped.py").write_text(CAPPED_TASK)
    (tmp_path / "script.yaml").write_text("members: {'*': [a, b, c, d]}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "inspect_ai._cli.main",
            "eval",
            "capped.py",
            "--model",
            "scripted/demo",
            "-M",
            "script=script.yaml",
            "--log-dir",
            "logs",
            "--display",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    console = " ".join((done.stdout + done.stderr).split())
    assert "sample q1 (epoch 1): the swarm's token cap (300) was reached by react-" in console
    assert ": 330 used" in console


@swarm_controller
def enough_after_one() -> Controller:
    """Start every member; stop as soon as one ends, for a reason of its own."""

    async def run(control: SwarmControl) -> StopReason:
        for m in control.members:
            control.start(m)
        async with aclosing(control.events()) as events:
            async for _ in events:
                return "enough"
        return "all_done"

    return Controller(run)


def test_a_controllers_reason_and_the_time_cap_are_named(backend: str, tmp_path: Path) -> None:
    own = resolved(
        run(
            swarm(member(react, count=2), controller=enough_after_one(), channels=[],
                  budget=Budget(grace=0.2)),
            {"react-1": [{"submit": "42"}], "react-2": [{"text": "x", "delay": 30}]},
            tmp_path / "own",
        )
    )  # fmt: skip
    assert last_word(own, "react-2") == (
        "**react-2** cancelled after the grace period (0.2 s): its controller stopped it: enough"
    )
    [summary] = summaries(own)
    assert "**Stopped**: its controller stopped it: enough" in summary

    timed = resolved(
        run(
            swarm(member(react, count=1), channels=[], budget=Budget(time=0.5, grace=0.2)),
            {"*": [{"text": "x", "delay": 30}]},
            tmp_path / "timed",
        )
    )
    assert last_word(timed, "react") == (
        "**react** cancelled after the grace period (0.2 s): the swarm's time cap (0.5 s) passed"
    )
    [summary] = summaries(timed)
    assert "**Stopped**: the swarm's time cap (0.5 s) passed" in summary
    [warning] = warnings(timed)
    assert warning.endswith("the swarm's time cap (0.5 s) passed.")


def test_the_default_channel_without_a_sandbox_is_said_once(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspect_logger, "_warned", [])  # the console warns once per process
    script = {"*": [{"submit": "42"}]}
    two = [Sample(id=n, input="What is six times seven?", target="42") for n in (1, 2)]
    [log] = eval(
        Task(dataset=two, solver=swarm(member(react, count=2)), scorer=includes()),
        model=scripted_model({"members": script}),
        log_dir=str(tmp_path / "none"),
        display="none",
    )
    said = [w for s in log.samples or [] for w in warnings(s) if "filesystem channel" in w]
    # once for the two samples (the logged message starts with the sample it came from)
    assert [w.splitlines()[-1] for w in said] == [
        "swarm(): the filesystem channel (the default) tells members to share files in /shared "
        "of the sample's sandbox, and this sample has none. Pass channels=[] for no channel, or "
        "channels=[shared_memory()] for a board the swarm records."
    ]
    # with a sandbox, or with no channel, there is nothing to say
    monkeypatch.setattr(inspect_logger, "_warned", [])
    for solver, args in (
        (swarm(member(react, count=2)), {"sandbox": "local"}),
        (swarm(member(react, count=2), channels=[]), {}),
    ):
        sample = run(solver, script, tmp_path / "quiet", task_args=args)
        assert not any("filesystem channel" in w for w in warnings(sample))
