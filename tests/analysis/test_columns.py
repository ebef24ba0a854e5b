"""SwarmColumns on real logs, with known answers."""

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from inspect_ai import Task, eval
from inspect_ai.analysis import SampleSummary, samples_df
from inspect_ai.dataset import Sample
from inspect_ai.model import Model, ModelUsage
from inspect_ai.model._model_info import clear_model_info_cache
from inspect_ai.solver import Generate, TaskState, solver

from inspect_swarm import _context
from inspect_swarm._contracts._budget import Budget
from inspect_swarm._runtime._sample_records import write_ledger
from inspect_swarm._runtime._tap import TranscriptTap, tapped
from inspect_swarm.analysis import SwarmColumns
from inspect_swarm.scripted import scripted_model

from ..budget.budget_harness import budget_parts


class Host:
    def __init__(self, budget: Budget, model: Model) -> None:
        self.runs, self.meter, self.enforcer = budget_parts(budget, ["m"], [model])

    def charge(self, model: str, usage: ModelUsage, *, cached: bool) -> None:
        member = self.runs[0] if _context.current_member() == "m" else None
        self.enforcer.charge(model, usage, member, cached=cached)

    def before_generate(self, member: str | None, messages: int) -> None:
        pass

    def note_change(self) -> None:
        pass


@solver
def one_member(model: Model, budget: Budget, calls: int) -> Any:
    """A swarm of one member, `m`, metered as the runtime meters it."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        host = Host(budget, model)
        token = _context._swarm.set(host)  # type: ignore[arg-type]
        host.meter.open()
        host.enforcer.open()
        with tapped(TranscriptTap(host, {"m": host.runs[0]}, host.meter)):  # type: ignore[arg-type]
            _context._member.set("m")
            for _ in range(calls):
                await model.generate("go")
            _context._member.set(None)
        host.runs[0].status = "submitted"
        write_ledger(
            host.enforcer.ledger(
                stop_reason="submitted",
                ended_by=None,
                interrupted=False,
                final_cancelled=False,
                resumed=False,
                elapsed=1.0,
            ).model_dump(mode="json")
        )
        _context._swarm.reset(token)
        return state

    return solve


@solver
def plain(model: Model) -> Any:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await model.generate("go")
        return state

    return solve


def run(tmp_path: Path, solver: Any, model: Model, **limits: Any) -> None:
    task = Task(dataset=[Sample(input="x")], solver=solver, **limits)
    [log] = eval(task, model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error


def test_swarm_columns(tmp_path: Path) -> None:
    clear_model_info_cache()
    script = {"members": {"*": []}, "then": {"text": "ok"}}
    priced = scripted_model(script)
    run(tmp_path, one_member(priced, Budget(tokens=1000, time=60), calls=3), priced)
    unpriced = scripted_model(script, name="free", price=None)
    run(tmp_path, one_member(unpriced, Budget(), calls=1), unpriced, token_limit=2000)
    run(tmp_path, plain(priced), priced)

    df = samples_df(str(tmp_path), columns=SampleSummary + SwarmColumns, quiet=True)
    assert len(df) == 3
    rows = {
        "none" if pd.isna(r.swarm_members) else "capped" if r.swarm_cost > 0 else "unpriced": r
        for r in df.itertuples()
    }
    capped, free, none = rows["capped"], rows["unpriced"], rows["none"]
    assert capped.swarm_cost == pytest.approx(3 * 0.002)
    assert bool(capped.swarm_complete) and not bool(capped.swarm_resumed)
    assert capped.swarm_members == 1
    assert (capped.swarm_token_cap, capped.swarm_time_cap) == (1000, 60)
    assert pd.isna(capped.swarm_cost_cap)
    assert (capped.swarm_errored, capped.swarm_no_usage, capped.swarm_unpriced) == (0, 0, 0)
    assert json.loads(capped.swarm_unpriced_models) == []

    assert free.swarm_cost == 0.0 and not bool(free.swarm_complete)
    assert free.swarm_token_cap == 1900 and free.swarm_unpriced == 1
    assert json.loads(free.swarm_unpriced_models) == ["scripted/free"]

    # no ledger: the columns read from it are null, cost still comes from model_usage
    assert none.swarm_cost == pytest.approx(0.002)
    assert not bool(none.swarm_complete) and not bool(none.swarm_resumed)
    assert pd.isna(none.swarm_members) and pd.isna(none.swarm_unpriced_models)


def test_swarm_columns_on_swarm_logs(tmp_path: Path) -> None:
    from inspect_ai.agent import react

    from inspect_swarm import member, swarm

    clear_model_info_cache()
    model = scripted_model({"members": {"*": [{"text": "thinking"}, {"submit": "42"}]}})
    for k in (1, 3):
        solver = swarm(member(react, count=k), channels=[])
        task = Task(dataset=[Sample(input="x", target="42")], solver=solver, cost_limit=1.0)
        [log] = eval(task, model=model, log_dir=str(tmp_path), display="none")
        assert log.status == "success", log.error

    df = samples_df(str(tmp_path), columns=SampleSummary + SwarmColumns, quiet=True)
    by_members = {int(r.swarm_members): r for r in df.itertuples()}
    one, three = by_members[1], by_members[3]
    # the first submission stops the others, which finish the call they have in flight
    assert one.swarm_cost == pytest.approx(2 * 0.002)
    assert 3 * 0.002 <= three.swarm_cost <= 6 * 0.002
    for row in (one, three):
        assert row.swarm_cost_cap == pytest.approx(0.95)  # the same cap for a swarm of one and of k
        assert bool(row.swarm_complete) and not bool(row.swarm_resumed)
        assert pd.isna(row.swarm_token_cap) and pd.isna(row.swarm_time_cap)
        assert (row.swarm_errored, row.swarm_no_usage, row.swarm_unpriced) == (0, 0, 0)
        assert json.loads(row.swarm_unpriced_models) == []
