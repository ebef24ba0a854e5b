"""vote(): every member answers, and the answer most of them agree on wins."""

from pathlib import Path

import pytest
from inspect_ai.agent import react

from inspect_swarm import member, swarm, vote

from .helpers import result, run, statuses, stop_reason


def test_the_majority_answer_wins_with_the_tally(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=3), controller=vote(), channels=[]),
        {
            "react-1": [{"submit": "41"}],
            "react-2": [{"submit": "42", "delay": 0.1}],
            "react-3": [{"submit": " 42 ", "delay": 0.2}],
        },
        tmp_path,
    )
    assert stop_reason(sample) == "all_done"
    assert sample.output.completion == "42"
    assert result(sample)["final"] == {
        "mode": "controller",
        "member": "react-2",
        "reason": "vote: 2 of 3 submissions agree (2: react-2, react-3; 1: react-1)",
        "provisional": False,
    }
    assert "the answer most members agree on" in " ".join(sample.attachments.values())


def test_a_tie_goes_to_the_earliest_answer(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=4), controller=vote(), channels=[]),
        {
            "react-1": [{"submit": "Forty-two", "delay": 0.2}],
            "react-2": [{"submit": "41"}],
            "react-3": [{"submit": "forty-TWO", "delay": 0.3}],
            "react-4": [{"submit": "41", "delay": 0.1}],
        },
        tmp_path,
    )
    final = result(sample)["final"]
    assert final["member"] == "react-2"
    assert (
        final["reason"]
        == "vote: 2 of 4 submissions agree (2: react-2, react-4; 2: react-1, react-3)"
    )


def test_members_without_a_submission_do_not_vote(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=3), controller=vote(), channels=[]),
        {
            "react-1": [{"text": "no", "stop_reason": "model_length"}],
            "react-2": [{"submit": "41", "delay": 0.1}],
            "react-3": [{"text": "no", "stop_reason": "model_length"}],
        },
        tmp_path,
    )
    assert result(sample)["final"]["reason"] == "vote: 1 of 1 submissions agree (1: react-2)"
    nobody = run(
        swarm(member(react, count=2), controller=vote(), channels=[]),
        {"*": [{"text": "no", "stop_reason": "model_length"}]},
        tmp_path,
    )
    assert result(nobody)["final"]["mode"] is None and nobody.output.completion == ""


def test_stop_at_majority_stops_once_the_vote_is_decided(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=3), controller=vote(stop_at_majority=True), channels=[]),
        {
            "react-1": [{"submit": "42"}],
            "react-2": [{"submit": "42", "delay": 0.1}],
            "react-3": [{"text": "Still working.", "delay": 0.3}] * 20,
        },
        tmp_path,
    )
    assert stop_reason(sample) == "controller:majority"
    assert statuses(sample) == {
        "react-1": "submitted",
        "react-2": "submitted",
        "react-3": "stopped",
    }
    assert (
        result(sample)["final"]["reason"] == "vote: 2 of 2 submissions agree (2: react-1, react-2)"
    )


def test_a_split_vote_is_not_a_majority(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=4), controller=vote(stop_at_majority=True), channels=[]),
        {
            "react-1": [{"submit": "42"}],
            "react-2": [{"submit": "42", "delay": 0.1}],
            "react-3": [{"submit": "41", "delay": 0.2}],
            "react-4": [{"submit": "41", "delay": 0.3}],
        },
        tmp_path,
    )
    # two of four is half, not more: every member votes, and the tie goes to the earliest
    assert stop_reason(sample) == "all_done"
    assert set(statuses(sample).values()) == {"submitted"}
    assert result(sample)["final"]["member"] == "react-1"


def test_a_vote_needs_two_members() -> None:
    with pytest.raises(ValueError, match=r"vote\(\): a vote needs at least 2 members.*has 1"):
        swarm(member(react), controller=vote(), channels=[])
