"""What members see: swarm_budget() and the swarm_resources() tool."""

import re
from pathlib import Path

import pytest
from inspect_ai.model import Model
from inspect_ai.util import store

from inspect_swarm import _context
from inspect_swarm._contracts._budget import Budget, BudgetUsage
from inspect_swarm._tools._resources import swarm_budget, swarm_resources

from .budget_harness import FakeHost, run_meter

pytestmark = pytest.mark.anyio

BUDGET = Budget(tokens=1000, cost=1.0, time=600, split="equal")


async def body(host: FakeHost, model: Model) -> None:
    store().set("test:controller", repr(swarm_budget()))
    _context._member.set("a")
    await model.generate("go")
    await model.generate("go")
    budget = swarm_budget()
    store().set("test:member", [repr(budget.cost), repr(budget.tokens), budget.token_type])
    store().set("test:time", [budget.time.cap, budget.time.used] if budget.time else None)
    store().set("test:tool", await swarm_resources()())


async def test_swarm_budget_in_a_member_and_the_swarm(tmp_path: Path) -> None:
    _, sample = await run_meter(tmp_path, body, budget=BUDGET)
    cost, tokens, token_type = sample.store["test:member"]
    assert tokens == repr(BudgetUsage(cap=1000, used=220, share=500.0, share_used=220))
    assert cost == repr(BudgetUsage(cap=1.0, used=0.004, share=0.5, share_used=0.004))
    assert token_type == "all"
    cap, used = sample.store["test:time"]
    assert cap == 600 and 0 <= used < 600
    # outside every member: the caps and what the swarm used, no share
    assert (
        "tokens=BudgetUsage(cap=1000, used=0, share=None, share_used=None)"
        in (sample.store["test:controller"])
    )


async def test_swarm_resources_leads_with_what_is_left(tmp_path: Path) -> None:
    _, sample = await run_meter(tmp_path, body, budget=BUDGET)
    text = sample.store["test:tool"]
    lines = text.splitlines()
    assert lines[0] == "The swarm's caps (cost and tokens are split as equal shares):"
    assert lines[1] == (
        "- Cost: $0.4960 left of your share, $0.9960 of the cap (cap $1.00, $0.0040 used by all "
        "members; your share $0.5000, you used $0.0040)."
    )
    assert lines[2] == (
        "- Tokens: 280 left of your share, 780 of the cap (cap 1,000 tokens, 220 used by all "
        "members; your share 500 tokens, you used 220)."
    )
    assert re.fullmatch(r"- Time: (\d+) left \(cap 600 seconds, (\d+) elapsed\)\.", lines[3])


async def test_swarm_resources_of_a_pool(tmp_path: Path) -> None:
    _, sample = await run_meter(tmp_path, body, budget=Budget(tokens="output:1000"))
    assert sample.store["test:tool"].splitlines()[1:] == [
        "- Tokens: 980 left (cap 1,000 output tokens, 20 used by all members)."
    ]


def test_swarm_budget_outside_a_swarm() -> None:
    with pytest.raises(RuntimeError, match=r"swarm_budget\(\) .* outside a swarm"):
        swarm_budget()
