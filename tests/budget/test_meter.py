"""The swarm meter in real evals: members simulated in child tasks, hooked and subscribed as the
runtime does it."""

import math
from pathlib import Path

import anyio
import pytest
from inspect_ai.model import Model, ModelAPI, ModelOutput, get_model, modelapi
from inspect_ai.util import suspend_token_limit

from inspect_swarm import _context
from inspect_swarm._contracts._budget import Budget
from inspect_swarm.analysis import SwarmLedger, swarm_ledger
from inspect_swarm.scripted import scripted_model

from .budget_harness import (
    FakeHost,
    MemberOutcome,
    as_member,
    as_phase,
    members_body,
    run_meter,
    script,
)

pytestmark = pytest.mark.anyio

CALL_TOKENS = 110  # the scripted model's default usage: 100 input, 10 output
CALL_COST = 0.002  # at its default price: $10 input and $100 output per million


def ledger_of(sample) -> SwarmLedger:
    ledger = swarm_ledger(sample)
    assert ledger is not None
    return ledger


async def test_ledger_identities(tmp_path: Path) -> None:
    async def body(host: FakeHost, model: Model) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(as_member, "a", 2, model, host)
            tg.start_soon(as_member, "b", 3, model, host)
            tg.start_soon(as_phase, "runtime", 1, model)
        await as_phase("final", 1, model)

    log, sample = await run_meter(tmp_path, body)
    assert log.status == "success", log.error
    ledger = ledger_of(sample)
    a, b = ledger.members
    assert (a.name, a.calls.calls, a.meter.usage.total_tokens) == ("a", 2, 2 * CALL_TOKENS)
    assert (b.name, b.calls.calls, b.meter.usage.total_tokens) == ("b", 3, 3 * CALL_TOKENS)
    assert a.meter.cost == pytest.approx(2 * CALL_COST)
    assert ledger.runtime.usage.total_tokens == ledger.final.usage.total_tokens == CALL_TOKENS
    parts = [a.meter, b.meter, ledger.runtime, ledger.final]
    assert sum(m.usage.total_tokens for m in parts) == ledger.swarm.usage.total_tokens
    assert math.isclose(sum(m.cost for m in parts), ledger.swarm.cost, abs_tol=1e-12)
    assert ledger.calls.calls == 7  # each event counted once, though delivered more than once
    assert ledger.sample_delta.total_tokens == 7 * CALL_TOKENS
    assert ledger.unattributed.total_tokens == 0 and ledger.unattributed.total_cost == 0.0
    assert ledger.total_complete and ledger.attribution_complete
    assert ledger.overshoot == {} and ledger.stop_reason is None
    assert ledger.sample_limits == dict.fromkeys(
        ["token", "cost", "message", "turn", "working", "time"]
    )
    infos = [e for e in sample.events if e.event == "info" and e.source == "inspect_swarm"]
    assert [i.data["type"] for i in infos] == ["ledger"]
    assert SwarmLedger.model_validate(infos[0].data["ledger"]) == ledger


async def test_token_cap_pool_and_overshoot(tmp_path: Path) -> None:
    _, sample = await run_meter(
        tmp_path, members_body({"a": 10, "b": 10}), budget=Budget(tokens=500)
    )
    ledger = ledger_of(sample)
    verdicts = sample.store["test:verdicts"]
    assert verdicts and all(v == "swarm_cap" for _, v in verdicts)
    used = ledger.swarm.usage.total_tokens
    assert used >= 500 and used < 500 + 2 * CALL_TOKENS
    assert ledger.caps == {"cost": None, "tokens": 500, "time": None}
    assert ledger.overshoot == {"tokens": used - 500}
    assert ledger.stop_reason == "swarm_cap"


async def test_cost_cap(tmp_path: Path) -> None:
    _, sample = await run_meter(tmp_path, members_body({"a": 10}), budget=Budget(cost=0.005))
    ledger = ledger_of(sample)
    # the third call reaches $0.005
    assert sample.store["test:verdicts"] == [["a", "swarm_cap"]]
    assert ledger.members[0].calls.calls == 3
    assert ledger.overshoot["cost"] == pytest.approx(3 * CALL_COST - 0.005)


async def test_equal_split_share_is_not_given_to_others(tmp_path: Path) -> None:
    _, sample = await run_meter(
        tmp_path, members_body({"a": 20, "b": 2}), budget=Budget(tokens=1000, split="equal")
    )
    ledger = ledger_of(sample)
    assert sample.store["test:verdicts"] == [["a", "share"]]
    a, b = ledger.members
    assert (a.status, a.calls.calls) == ("share", 5)  # 550 tokens reach the 500 share
    assert (b.status, b.calls.calls) == ("submitted", 2)
    assert ledger.stop_reason is None and ledger.overshoot == {}


async def test_weighted_split(tmp_path: Path) -> None:
    _, sample = await run_meter(
        tmp_path, members_body({"a": 20, "b": 6}), budget=Budget(tokens=1000, split=(1, 3))
    )
    a, b = ledger_of(sample).members
    assert (a.status, a.calls.calls) == ("share", 3)  # 330 tokens reach the share of 250
    assert (b.status, b.calls.calls) == ("submitted", 6)  # 660 tokens, below the share of 750
    assert sample.store["test:verdicts"] == [["a", "share"]]


async def test_cap_beats_share(tmp_path: Path) -> None:
    async def body(host: FakeHost, model: Model) -> None:
        await as_member_task("b", 1, model, host)
        await as_member_task("a", 1, model, host)

    _, sample = await run_meter(tmp_path, body, budget=Budget(tokens=200, split="equal"))
    # b's call reaches its share of 100; a's call reaches its share and the cap at once
    assert sample.store["test:verdicts"] == [["b", "share"], ["a", "swarm_cap"]]


async def as_member_task(name: str, calls: int, model: Model, host: FakeHost) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(as_member, name, calls, model, host)


async def test_cost_cap_needs_cost_data(tmp_path: Path) -> None:
    unpriced = scripted_model(script(), name="unpriced", price=None)
    log, sample = await run_meter(
        tmp_path, members_body({"a": 1}), budget=Budget(cost=1.0), model=unpriced
    )
    assert log.status == "error" and sample.error is not None
    assert "scripted/unpriced" in sample.error.message
    assert "set_model_cost() or --model-cost-config" in sample.error.message
    # the ledger is still written
    assert ledger_of(sample).interrupted


async def test_unpriced_model(tmp_path: Path) -> None:
    unpriced = scripted_model(script(), name="unpriced", price=None)
    _, sample = await run_meter(tmp_path, members_body({"a": 2}), model=unpriced)
    ledger = ledger_of(sample)
    assert ledger.calls.unpriced == ledger.members[0].calls.unpriced == 2
    assert ledger.unpriced_calls_recorded == 2
    assert ledger.unpriced_models == ["scripted/unpriced"]
    assert ledger.swarm.cost == 0.0 and ledger.swarm.usage.total_tokens == 2 * CALL_TOKENS
    assert not ledger.total_complete and not ledger.attribution_complete


async def test_errored_call(tmp_path: Path) -> None:
    model = scripted_model(
        {"members": {"a": [{"text": "ok"}, {"error": "provider down"}]}, "then": {"text": "ok"}}
    )

    async def body(host: FakeHost, model: Model) -> None:
        _context._member.set("a")
        await model.generate("go")
        with pytest.raises(Exception, match="provider down"):
            await model.generate("go")

    _, sample = await run_meter(tmp_path, body, model=model, members=("a",))
    ledger = ledger_of(sample)
    assert (ledger.calls.calls, ledger.calls.errored) == (1, 1)
    assert ledger.members[0].calls.errored == 1
    assert not ledger.total_complete


async def test_cache_replays_cost_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path / "cache"))
    _, sample = await run_meter(tmp_path, members_body_cached(), members=("a",))
    ledger = ledger_of(sample)
    member = ledger.members[0]
    assert (member.calls.calls, member.calls.cache_replays) == (1, 1)
    assert member.meter.usage.total_tokens == CALL_TOKENS
    assert member.meter.cost == pytest.approx(CALL_COST)
    assert ledger.total_complete and ledger.attribution_complete


def members_body_cached():
    async def body(host: FakeHost, model: Model) -> None:
        _context._member.set("a")
        for _ in range(2):
            await model.generate("same input", cache=True)

    return body


async def test_suspended_token_metering(tmp_path: Path) -> None:
    async def body(host: FakeHost, model: Model) -> None:
        _context._member.set("a")
        await model.generate("go")
        with suspend_token_limit():  # as approval and review calls are
            await model.generate("review")

    _, sample = await run_meter(tmp_path, body, members=("a",))
    ledger = ledger_of(sample)
    meter = ledger.members[0].meter
    assert meter.usage.total_tokens == CALL_TOKENS
    assert meter.cost == pytest.approx(2 * CALL_COST)
    assert meter.suspended_cost == pytest.approx(CALL_COST)
    # the sample counted the suspended call's tokens, which no meter holds
    assert ledger.unattributed.total_tokens == CALL_TOKENS
    assert ledger.unattributed.total_cost == 0.0
    assert ledger.total_complete and not ledger.attribution_complete


@pytest.mark.parametrize("cause", ["cancelled", "background_cancelled", "final", "interrupted"])
async def test_causes_that_clear_total_complete(tmp_path: Path, cause: str) -> None:
    async def body(host: FakeHost, model: Model) -> None:
        await as_member_task("a", 1, model, host)
        if cause == "cancelled":
            host.outcomes["a"] = MemberOutcome(name="a", status="cancelled", cancelled=True)
        elif cause == "background_cancelled":
            host.outcomes["a"] = MemberOutcome(
                name="a", status="submitted", background_started=2, background_cancelled=1
            )
        elif cause == "final":
            host.final_cancelled = True
        else:
            raise RuntimeError("the controller failed")

    _, sample = await run_meter(tmp_path, body, members=("a",))
    ledger = ledger_of(sample)
    assert ledger.calls.calls == 1 and ledger.unattributed.total_tokens == 0
    assert not ledger.total_complete and not ledger.attribution_complete
    assert ledger.interrupted == (cause == "interrupted")


@modelapi(name="no_usage")
def _no_usage_api() -> type[ModelAPI]:
    class NoUsage(ModelAPI):
        async def generate(self, input, tools, tool_choice, config) -> ModelOutput:  # type: ignore[no-untyped-def]
            return ModelOutput.from_content(self.model_name, "ok")  # usage stays None

    return NoUsage


async def test_call_with_no_usage(tmp_path: Path) -> None:
    model = get_model("no_usage/m", memoize=False)
    _, sample = await run_meter(tmp_path, members_body({"a": 2}), model=model, members=("a",))
    ledger = ledger_of(sample)
    assert (ledger.calls.calls, ledger.calls.no_usage) == (2, 2)
    assert ledger.members[0].calls.no_usage == 2
    assert not ledger.total_complete and not ledger.attribution_complete
