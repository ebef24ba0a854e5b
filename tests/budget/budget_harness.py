"""Test harness: a stand-in for the swarm runtime: it meters simulated members the way the runtime will.

Members are simulated by setting the `_context` ContextVars in child tasks; the meter and the
budget's enforcer are opened, hooked (`SwarmMeterHooks`) and tapped (`tapped()`) as the runtime
does it. The host records the rule each charged call reached and stops members itself.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from inspect_ai import Task, eval_async
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog, EvalSample
from inspect_ai.model import Model, ModelUsage
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import store

from inspect_swarm import _context
from inspect_swarm._contracts._budget import Budget, SwarmBudget
from inspect_swarm._contracts._member import Member, MemberSpec
from inspect_swarm._runtime._enforce import BudgetEnforcer
from inspect_swarm._runtime._member_run import MemberRun
from inspect_swarm._runtime._meter import SwarmMeter
from inspect_swarm._runtime._sample_records import write_ledger
from inspect_swarm._runtime._tap import TranscriptTap, tapped
from inspect_swarm.scripted import scripted_model


@dataclass(frozen=True)
class MemberOutcome:
    """How a simulated member ended, for its ledger entry."""

    name: str
    status: str | None
    cancelled: bool = False
    background_started: int = 0
    background_cancelled: int = 0


def member_runs(names: Sequence[str]) -> list[MemberRun]:
    """The swarm's per-member state for simulated (native) members."""
    return [
        MemberRun(MemberSpec(name=name, record=Member(bridged=False), index=i, sandbox=None))
        for i, name in enumerate(names)
    ]


def budget_parts(
    budget: Budget, members: Sequence[str], models: Sequence[Any]
) -> tuple[list[MemberRun], SwarmMeter, BudgetEnforcer]:
    """The members' state, the meter and the budget's enforcer of a simulated swarm."""
    runs = member_runs(members)
    meter = SwarmMeter(runs, list(models))
    return runs, meter, BudgetEnforcer(budget, meter, runs, lambda _: None, lambda: False)


class FakeHost:
    """The parts of the runtime's host the meter and its hooks use."""

    def __init__(self, budget: Budget, members: Sequence[str], models: Sequence[Any]) -> None:
        self.runs, self.meter, self.enforcer = budget_parts(budget, members, models)
        self.by_name = {m.name: m for m in self.runs}
        self.members = list(members)
        self.verdicts: list[tuple[str | None, str]] = []
        self.stopped: set[str] = set()
        self.outcomes = {m: MemberOutcome(name=m, status="submitted") for m in members}
        self.stop_reason: str | None = None
        self.interrupted = False
        self.final_cancelled = False
        self._start = anyio.current_time()

    @property
    def roster(self) -> list[Any]:
        return []

    @property
    def stopping(self) -> bool:
        return bool(self.stopped)

    @property
    def bus(self) -> None:
        return None

    def clock(self) -> float:
        return anyio.current_time() - self._start

    def on_charge_verdict(self, member: str | None, verdict: str | None) -> None:
        if verdict is None:
            return
        self.verdicts.append((member, verdict))
        if verdict == "swarm_cap":
            self.stop_reason = self.stop_reason or "swarm_cap"
            self.stopped.update(self.members)
        elif member is not None:
            self.stopped.add(member)
            self.outcomes[member] = MemberOutcome(name=member, status="share")

    def before_generate(self, member: str | None, messages: int) -> None:
        pass

    def note_change(self) -> None:
        pass

    def charge(self, model: str, usage: ModelUsage, *, cached: bool) -> None:
        member = _context.current_member()
        m = self.by_name.get(member) if member is not None else None
        self.on_charge_verdict(member, self.enforcer.charge(model, usage, m, cached=cached))

    def budget(self, member: str | None) -> SwarmBudget:
        return self.enforcer.view(self.by_name.get(member or ""), self.clock())

    def ledger(self) -> Any:
        for m in self.runs:
            outcome = self.outcomes[m.name]
            m.status = outcome.status  # type: ignore[assignment]
            m.cancelled = outcome.cancelled
            m.background.started = outcome.background_started
            m.background.cancelled = outcome.background_cancelled
        return self.enforcer.ledger(
            stop_reason=self.stop_reason,  # type: ignore[arg-type]
            ended_by=None,
            interrupted=self.interrupted,
            final_cancelled=self.final_cancelled,
            resumed=False,
            elapsed=self.clock(),
        )


Body = Callable[[FakeHost, Model], Awaitable[None]]


async def as_member(name: str, calls: int, model: Model, host: FakeHost, **generate: Any) -> None:
    """Run `calls` generations as member `name`, stopping when the host stops it."""
    _context._member.set(name)  # this task's own context copy
    for _ in range(calls):
        if name in host.stopped:
            return
        await model.generate("go", **generate)


async def as_phase(phase: str, calls: int, model: Model) -> None:
    _context._phase.set(phase)  # type: ignore[arg-type]
    for _ in range(calls):
        await model.generate("go")


def members_body(work: dict[str, int]) -> Body:
    async def body(host: FakeHost, model: Model) -> None:
        async with anyio.create_task_group() as tg:
            for name, calls in work.items():
                tg.start_soon(as_member, name, calls, model, host)

    return body


@solver
def metered(
    body: Body, budget: Budget, members: Sequence[str], model: Model, models: Sequence[Any]
) -> Any:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        host = FakeHost(budget, members, models)
        token = _context._swarm.set(host)  # type: ignore[arg-type]
        try:
            host.meter.open()
            host.enforcer.open()
            store().set("test:caps", host.enforcer.caps.as_dict())
            tap = TranscriptTap(host, host.by_name, host.meter)  # type: ignore[arg-type]
            with tapped(tap):
                await body(host, model)
        except BaseException:
            host.interrupted = True
            raise
        finally:
            write_ledger(host.ledger().model_dump(mode="json"))
            store().set("test:verdicts", [list(v) for v in host.verdicts])
            _context._swarm.reset(token)
        return state

    return solve


def script(usage: dict[str, int] | None = None, **members: Any) -> dict[str, Any]:
    steps = {name: value for name, value in members.items()}
    return {
        "members": steps or {"*": []},
        "then": {"text": "ok"},
        **({"usage": usage} if usage else {}),
    }


async def run_meter(
    tmp_path: Path,
    body: Body,
    *,
    budget: Budget | None = None,
    members: Sequence[str] = ("a", "b"),
    model: Model | None = None,
    models: Sequence[Any] | None = None,
    **task_args: Any,
) -> tuple[EvalLog, EvalSample]:
    """Run one sample whose solver meters `body` as a swarm of `members`."""
    model = model or scripted_model(script())
    task = Task(
        dataset=[Sample(input="x", target="y")],
        solver=metered(body, budget or Budget(), members, model, models or [model]),
        **task_args,
    )
    [log] = await eval_async(task, model=model, log_dir=str(tmp_path))
    assert log.samples
    return log, log.samples[0]
