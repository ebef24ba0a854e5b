from pathlib import Path

import anyio
import pytest
from inspect_ai.agent import react

from inspect_swarm import (
    Budget,
    Controller,
    StopReason,
    SwarmControl,
    leaderless,
    member,
    swarm,
    swarm_controller,
)

from .helpers import result, run, statuses

SLOW = [{"text": "still working", "delay": 0.2}]


def test_a_call_in_flight_at_a_submission_finishes_and_is_recorded(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(member(react, count=2), channels=[]),
        {
            "react-1": [{"submit": "42", "delay": 0.1}],
            "react-2": [{"text": "mid-call", "delay": 0.6}, *SLOW],
        },
        tmp_path,
    )
    assert statuses(sample) == {"react-1": "submitted", "react-2": "stopped"}
    metrics = sample.store["inspect_swarm:metrics"]
    # the in-flight call completed (one step), then its next call was refused
    assert [m["steps"] for m in metrics["members"]] == [1, 1]
    ledger = sample.store["inspect_swarm:ledger"]
    assert [m["calls"]["calls"] for m in ledger["members"]] == [1, 1]
    assert [m["cancelled"] for m in ledger["members"]] == [False, False]


@pytest.mark.parametrize("rule", ["first", "last"])
def test_ties_go_to_the_member_listed_first(
    rule: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every event at the same instant of the swarm's clock
    monkeypatch.setattr("inspect_swarm._run._now", lambda: 100.0)
    sample = run(
        swarm(
            member(react, count=3),
            controller=leaderless(stop_on_submission=False, final=rule),  # type: ignore[arg-type]
            channels=[],
        ),
        {
            "react-1": [{"submit": "1", "delay": 0.3}],
            "react-2": [{"submit": "2"}],
            "react-3": [{"submit": "3", "delay": 0.1}],
        },
        tmp_path,
    )
    assert result(sample)["final"]["member"] == "react-1"


def test_the_real_clock_orders_submissions(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=3), controller=leaderless(stop_on_submission=False), channels=[]),
        {
            "react-1": [{"submit": "1", "delay": 0.3}],
            "react-2": [{"submit": "2", "delay": 0.2}],
            "react-3": [{"submit": "3", "delay": 0.1}],
        },
        tmp_path,
    )
    assert result(sample)["final"]["member"] == "react-3"


@swarm_controller
def trickle(shielded: bool = False) -> Controller:
    """Start members one at a time, pausing between them."""

    async def run(swarm: SwarmControl) -> StopReason:
        for m in swarm.members:
            swarm.start(m)
            with anyio.CancelScope(shield=shielded):
                await anyio.sleep(0.4)
        return "all_started"

    return Controller(run)


@pytest.mark.parametrize("shielded", [False, True])
def test_a_stop_while_the_controller_is_starting_members(
    shielded: bool, backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            member(react, count=3),
            controller=trickle(shielded),
            channels=[],
            budget=Budget(time=0.2, grace=0.1),
        ),
        {"*": SLOW * 20},
        tmp_path,
    )
    assert sample.error is None
    record = result(sample)
    assert [m["state"] for m in record["members"]] == ["ended", "pending", "pending"]
    assert record["members"][0]["status"] in ("stopped", "cancelled")
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "swarm_time"


def test_a_limit_keeps_the_answer_so_far_as_provisional(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            member(react, count=2),
            controller=leaderless(stop_on_submission=False),
            channels=[],
            # no reserve: the sample's own limit ends the sample before the swarm's cap stops it
            budget=Budget(reserve=0),
        ),
        {"react-1": [{"submit": "42", "delay": 0.1}], "react-2": SLOW * 50},
        tmp_path,
        token_limit=500,
    )
    assert sample.limit is not None and sample.limit.type == "token"
    record = result(sample)
    assert record["final"] == {
        "mode": "first",
        "member": "react-1",
        "reason": None,
        "provisional": True,
    }
    assert sample.output.completion == "42"
    assert statuses(sample) == {"react-1": "submitted", "react-2": "cancelled"}
