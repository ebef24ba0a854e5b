from pathlib import Path

import pytest
from inspect_ai.agent import react
from inspect_ai.event import StoreEvent

from inspect_swarm import leaderless, member, swarm

from .helpers import infos, lanes, result, run, statuses

SLOW = [{"text": "still working", "delay": 0.2}]


def test_first_submission_is_the_answer_and_stops_the_others(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=3), channels=[]),
        {"react-2": [{"text": "thinking", "delay": 0.05}, {"submit": "42"}], "*": SLOW * 50},
        tmp_path,
    )
    assert statuses(sample) == {"react-1": "stopped", "react-2": "submitted", "react-3": "stopped"}
    record = result(sample)
    assert record["version"] == 1
    assert record["final"] == {
        "mode": "first",
        "member": "react-2",
        "reason": None,
        "provisional": False,
    }
    assert [m["state"] for m in record["members"]] == ["ended"] * 3
    assert sample.output.completion == "42"
    assert sample.scores and sample.scores["includes"].value == "C"
    # the sample's messages are its input followed by the answer's message
    assert sample.messages[0].text == "What is six times seven?"
    answer = sample.messages[-1]
    assert answer.role == "assistant"
    assert answer.metadata == {"inspect_swarm": {"final": {"mode": "first", "member": "react-2"}}}
    assert len(sample.messages) == 2
    [ledger] = infos(sample, "ledger")
    assert ledger["ledger"]["stop_reason"] == "submitted"


def test_each_member_has_its_own_timeline(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, name="w", count=2), channels=[]),
        {"w-1": [{"submit": "42"}], "w-2": SLOW * 20},
        tmp_path,
    )
    assert {"w-1", "w-2"} <= set(lanes(sample))


def test_store_changes_are_logged_once_by_the_swarm_span(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), channels=[]),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    spans = {
        e.id: e.name
        for e in sample.events
        if e.event == "span_begin"  # type: ignore[union-attr]
    }
    store_events = [e for e in sample.events if isinstance(e, StoreEvent)]
    member_spans = [e for e in store_events if spans.get(e.span_id or "") in ("react-1", "react-2")]
    assert member_spans == []
    changed = {
        op.path
        for e in store_events
        for op in e.changes  # type: ignore[attr-defined]
    }
    assert {"/inspect_swarm:result", "/inspect_swarm:ledger", "/inspect_swarm:metrics"} <= changed


def test_all_run_to_their_end_without_stop_on_submission(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=leaderless(stop_on_submission=False), channels=[]),
        {
            "react-1": [{"submit": "41"}],
            "react-2": [{"text": "checking", "delay": 0.1}, {"submit": "42"}],
        },
        tmp_path,
    )
    assert statuses(sample) == {"react-1": "submitted", "react-2": "submitted"}
    assert result(sample)["final"]["member"] == "react-1"
    [ledger] = infos(sample, "ledger")
    assert ledger["ledger"]["stop_reason"] == "all_done"


def test_last_rule_answers_with_the_latest_submission(tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(react, count=2),
            controller=leaderless(stop_on_submission=False, final="last"),
            channels=[],
        ),
        {
            "react-1": [{"text": "checking", "delay": 0.1}, {"submit": "42"}],
            "react-2": [{"submit": "41"}],
        },
        tmp_path,
    )
    assert result(sample)["final"]["mode"] == "last"
    assert result(sample)["final"]["member"] == "react-1"
    assert sample.output.completion == "42"


def test_last_needs_stop_on_submission_false() -> None:
    with pytest.raises(ValueError, match=r"final=\"last\"\) needs stop_on_submission=False"):
        leaderless(final="last")


def test_no_submission_gives_an_empty_answer(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(react(), channels=[]),
        {"*": [{"text": "too long", "stop_reason": "model_length"}]},
        tmp_path,
    )
    assert statuses(sample) == {"react": "unsubmitted"}
    assert result(sample)["final"] == {
        "mode": None,
        "member": None,
        "reason": "no_submissions",
        "provisional": False,
    }
    assert sample.output.completion == ""
    assert len(sample.messages) == 1
    assert sample.scores and sample.scores["includes"].value == "I"
