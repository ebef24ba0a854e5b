"""Budgets end to end: real swarms of react() members on the scripted model."""

import math
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai.agent import Agent, AgentState, agent, react
from inspect_ai.log._samples import sample_active

from inspect_swarm import Budget, leaderless, member, swarm
from inspect_swarm.analysis import SwarmLedger, swarm_ledger

from ..runtime.helpers import run, statuses

CALL_TOKENS = 110  # the scripted model's default usage: 100 input and 10 output tokens
CALL_COST = 0.002  # at its default price


def busy(n: int = 60, delay: float = 0.0) -> list[dict[str, Any]]:
    return [{"text": "working", "delay": delay}] * n


def ledger_of(sample: Any) -> SwarmLedger:
    ledger = swarm_ledger(sample)
    assert ledger is not None
    return ledger


def every_member(budget: Budget, count: int = 2, **controller: Any) -> Any:
    return swarm(
        member(react, count=count),
        channels=[],
        budget=budget,
        controller=leaderless(**controller) if controller else "leaderless",
    )


def assert_identities(ledger: SwarmLedger) -> None:
    parts = [m.meter for m in ledger.members] + [ledger.runtime, ledger.final]
    assert sum(p.usage.total_tokens for p in parts) == ledger.swarm.usage.total_tokens
    assert math.isclose(sum(p.cost for p in parts), ledger.swarm.cost, abs_tol=1e-12)
    assert ledger.unattributed.total_tokens >= 0 and (ledger.unattributed.total_cost or 0) >= 0


@pytest.mark.parametrize(
    ("budget", "limits", "kind", "cap"),
    [
        (Budget(reserve=0.2), {"token_limit": 1000}, "tokens", 800),
        (Budget(tokens=500), {}, "tokens", 500),
        (Budget(reserve=0.2), {"cost_limit": 0.02}, "cost", 0.016),
        (Budget(cost=0.01), {}, "cost", 0.01),
    ],
)
def test_usage_caps_stop_the_swarm(
    backend: str, tmp_path: Path, budget: Budget, limits: dict[str, Any], kind: str, cap: float
) -> None:
    sample = run(every_member(budget), {"*": busy()}, tmp_path, **limits)
    ledger = ledger_of(sample)
    assert ledger.caps[kind] == pytest.approx(cap)
    assert ledger.stop_reason == "swarm_cap" and ledger.ended_by is None
    assert "swarm_cap" in statuses(sample).values()
    used = ledger.swarm.cost if kind == "cost" else ledger.swarm.usage.total_tokens
    assert used >= cap
    assert ledger.overshoot.get(kind, 0.0) == pytest.approx(max(0.0, used - cap))
    assert sample.limit is None  # the reserve covered the calls in flight
    assert_identities(ledger)
    assert ledger.sample_delta.total_tokens == ledger.swarm.usage.total_tokens
    assert ledger.total_complete and ledger.attribution_complete


@pytest.mark.parametrize(
    ("budget", "limits"), [(Budget(reserve=0.9), {"time_limit": 5}), (Budget(time=0.5), {})]
)
def test_time_cap_stops_the_swarm(
    backend: str, tmp_path: Path, budget: Budget, limits: dict[str, Any]
) -> None:
    sample = run(every_member(budget), {"*": busy(200, delay=0.05)}, tmp_path, **limits)
    ledger = ledger_of(sample)
    assert 0 < (ledger.caps["time"] or 0) <= 0.5
    assert ledger.stop_reason == "swarm_time"
    assert set(statuses(sample).values()) == {"stopped"}
    assert sample.limit is None


def test_equal_split(backend: str, tmp_path: Path) -> None:
    sample = run(
        every_member(Budget(tokens=1000, split="equal"), stop_on_submission=False),
        {"react-1": busy(), "react-2": [*busy(2), {"submit": "42"}]},
        tmp_path,
    )
    ledger = ledger_of(sample)
    assert statuses(sample) == {"react-1": "share", "react-2": "submitted"}
    a, b = ledger.members
    assert a.meter.usage.total_tokens == 5 * CALL_TOKENS  # the call that reached 500
    assert b.meter.usage.total_tokens == 3 * CALL_TOKENS
    # react-1's share is not given to react-2, and the swarm's cap is never reached
    assert ledger.stop_reason == "all_done" and ledger.overshoot == {}


def test_weighted_split(tmp_path: Path) -> None:
    sample = run(
        every_member(Budget(tokens=1000, split=(1, 3)), stop_on_submission=False),
        {"react-1": busy(), "react-2": [*busy(5), {"submit": "42"}]},
        tmp_path,
    )
    assert statuses(sample) == {"react-1": "share", "react-2": "submitted"}
    assert ledger_of(sample).members[0].meter.usage.total_tokens == 3 * CALL_TOKENS  # share 250


def test_cap_beats_share(tmp_path: Path) -> None:
    sample = run(
        every_member(Budget(tokens=200, split="equal")),
        {"react-1": busy(), "react-2": [{"text": "late", "delay": 0.5}, *busy()]},
        tmp_path,
    )
    # react-1's first call reaches its share of 100; react-2's reaches its share and the cap
    assert statuses(sample) == {"react-1": "share", "react-2": "swarm_cap"}
    assert ledger_of(sample).stop_reason == "swarm_cap"


def test_calls_in_flight_at_a_stop_are_recorded(backend: str, tmp_path: Path) -> None:
    sample = run(
        every_member(Budget(tokens=300)),
        {"react-1": busy(delay=0.05), "react-2": [{"text": "slow", "delay": 1.0}, *busy()]},
        tmp_path,
    )
    ledger = ledger_of(sample)
    a, b = ledger.members
    assert a.status == "swarm_cap" and a.meter.usage.total_tokens == 3 * CALL_TOKENS
    # react-2's call was in flight at the stop: it finished within the grace period
    assert b.meter.usage.total_tokens == CALL_TOKENS and not b.cancelled
    assert ledger.overshoot == {"tokens": 4 * CALL_TOKENS - 300}
    assert ledger.total_complete


def test_a_member_cancelled_after_grace(tmp_path: Path) -> None:
    sample = run(
        every_member(Budget(grace=0)),
        {"react-1": [{"text": "a", "delay": 0.1}, {"submit": "42"}], "react-2": busy(delay=5)},
        tmp_path,
    )
    ledger = ledger_of(sample)
    assert statuses(sample)["react-2"] == "cancelled" and ledger.members[1].cancelled
    assert ledger.members[1].calls.errored == 1  # the call cancelled in flight
    assert not ledger.total_complete and not ledger.attribution_complete
    assert not ledger.interrupted


def test_unpriced_model(tmp_path: Path) -> None:
    sample = run(every_member(Budget()), {"*": [{"submit": "42"}]}, tmp_path, price=None)
    ledger = ledger_of(sample)
    assert ledger.unpriced_models == ["scripted/default"]
    assert ledger.calls.unpriced >= 1 and ledger.unpriced_calls_recorded >= 1
    assert not ledger.total_complete and not ledger.attribution_complete


def test_cost_cap_needs_cost_data(tmp_path: Path) -> None:
    sample = run(every_member(Budget(cost=1.0)), {"*": [{"submit": "42"}]}, tmp_path, price=None)
    assert sample.error is not None
    assert "scripted/default" in sample.error.message
    assert "set_model_cost() or --model-cost-config" in sample.error.message
    assert ledger_of(sample).interrupted


def test_errored_call_interrupts(tmp_path: Path) -> None:
    sample = run(
        every_member(Budget()),
        {"react-1": [{"error": "provider down"}], "react-2": busy(delay=0.05)},
        tmp_path,
    )
    ledger = ledger_of(sample)
    assert sample.error is not None and ledger.interrupted
    assert ledger.calls.errored >= 1 and ledger.members[0].calls.errored == 1
    assert not ledger.total_complete and ledger.ended_by is None


def test_ended_by_sample_token_limit(backend: str, tmp_path: Path) -> None:
    sample = run(every_member(Budget(tokens=100_000)), {"*": busy()}, tmp_path, token_limit=500)
    ledger = ledger_of(sample)
    assert sample.limit is not None and sample.limit.type == "token"
    assert ledger.ended_by == "sample_limit:token" and ledger.interrupted
    assert not ledger.total_complete


def test_ended_by_sample_time_limit(backend: str, tmp_path: Path) -> None:
    sample = run(
        every_member(Budget(time=100)), {"*": busy(200, delay=0.1)}, tmp_path, time_limit=1
    )
    ledger = ledger_of(sample)
    assert sample.limit is not None and sample.limit.type == "time"
    assert ledger.ended_by == "sample_limit:time" and ledger.interrupted


@agent
def interrupter() -> Agent:
    async def execute(state: AgentState) -> AgentState:
        active = sample_active()
        assert active is not None
        active.interrupt("score")
        await anyio.sleep(10)
        return state

    return execute


def test_ended_by_operator(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm([member(interrupter), member(react)], channels=[]), {"*": busy(delay=0.1)}, tmp_path
    )
    ledger = ledger_of(sample)
    assert sample.limit is not None and sample.limit.type == "operator"
    assert ledger.ended_by == "operator" and ledger.interrupted
    # an operator's interrupt is never swallowed: every member is cancelled with the sample
    assert {m["status"] for m in sample.store["inspect_swarm:result"]["members"]} == {"cancelled"}


def test_a_swarm_of_one_reads_the_same_caps_as_a_swarm_of_k(tmp_path: Path) -> None:
    caps = []
    for k in (1, 3):
        sample = run(
            every_member(Budget(), count=k),
            {"*": [{"submit": "42"}]},
            tmp_path / str(k),
            token_limit=10_000,
            cost_limit=1.0,
            time_limit=600,
        )
        ledger = ledger_of(sample)
        assert len(ledger.members) == k
        caps.append((ledger.caps["cost"], ledger.caps["tokens"], ledger.sample_limits))
    assert caps[0][:2] == caps[1][:2] == (pytest.approx(0.95), 9500)
    assert caps[0][2] == caps[1][2]
