"""Caps derived inside a real sample, under the sample's token, cost and time limits."""

from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import Model
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import store

from inspect_swarm._contracts._budget import Budget, derive_caps, effective_grace
from inspect_swarm.scripted import scripted_model

from .budget_harness import budget_parts

BUDGETS = {
    "default": Budget(),
    "reserve": Budget(reserve=0.2),
    "explicit": Budget(cost=2.0, tokens="output:1m", time=30.0),
    "explicit_int": Budget(tokens=5000),
    "grace": Budget(grace=10.0),
}


@solver
def derive(budget: Budget, model: Model) -> Any:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        # usage before the swarm starts is not the swarm's to spend
        await model.generate("before the swarm")
        for name, b in BUDGETS.items():
            caps = derive_caps(b)
            store().set(f"caps:{name}", [caps.cost, caps.tokens, caps.token_type, caps.time])
            store().set(f"grace:{name}", effective_grace(b))
        for n in (1, 3):
            _, meter, enforcer = budget_parts(budget, [f"m{i}" for i in range(n)], [model])
            meter.open()
            enforcer.open()
            store().set(f"meter:{n}", enforcer.caps.as_dict())
        return state

    return solve


def run(tmp_path: Path, **limits: Any) -> dict[str, Any]:
    model = scripted_model({"members": {"*": []}, "then": {"text": "ok"}})
    task = Task(dataset=[Sample(input="x")], solver=derive(Budget(), model), **limits)
    [log] = eval(task, model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    assert log.samples is not None
    return log.samples[0].store


def test_caps_derived_from_sample_limits(tmp_path: Path) -> None:
    found = run(tmp_path, token_limit=1000, cost_limit=1.0, time_limit=100)
    # one call of 110 tokens and $0.002 was made before the swarm started
    cost, tokens, token_type, time = found["caps:default"]
    assert cost == pytest.approx(0.95 - 0.002)
    assert (tokens, token_type) == (950 - 110, "all")
    assert 90 < time <= 95
    cost, tokens, _, time = found["caps:reserve"]
    assert cost == pytest.approx(0.8 - 0.002)
    assert tokens == 800 - 110
    assert 75 < time <= 80


def test_explicit_caps_ignore_the_sample_limits(tmp_path: Path) -> None:
    found = run(tmp_path, token_limit=1000, cost_limit=1.0, time_limit=100)
    assert found["caps:explicit"] == [2.0, 1_000_000, "output", 30.0]
    assert found["caps:explicit_int"][1:3] == [5000, "all"]


def test_derived_token_cap_keeps_the_metering_type(tmp_path: Path) -> None:
    found = run(tmp_path, token_limit="output:1000")
    assert found["caps:default"][1:3] == [950 - 10, "output"]
    assert found["caps:default"][0] is None and found["caps:default"][3] is None


def test_no_limits_no_caps(tmp_path: Path) -> None:
    found = run(tmp_path)
    assert found["caps:default"] == [None, None, "all", None]
    assert found["grace:default"] == 120.0


def test_grace_capped_at_half_the_remaining_time(tmp_path: Path) -> None:
    found = run(tmp_path, time_limit=100)
    assert 45 < found["grace:default"] <= 50
    assert found["grace:grace"] == 10.0


def test_a_swarm_of_one_reads_the_same_caps_as_a_swarm_of_k(tmp_path: Path) -> None:
    found = run(tmp_path, token_limit=1000, cost_limit=1.0)
    assert found["meter:1"] == found["meter:3"]
    assert found["meter:1"]["tokens"] == 840
