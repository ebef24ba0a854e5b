"""Test harness: a stand-in for the swarm runtime: it meters simulated members the way the runtime will.

Members are simulated by setting the `_context` ContextVars in child tasks; the meter is opened,
hooked (`SwarmMeterHooks`) and subscribed (`metering()`) as the runtime does it.
"""

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from inspect_ai import Task, eval_async
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog, EvalSample
from inspect_ai.model import Model
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import store

from inspect_swarm import _context
from inspect_swarm._contracts._budget import Budget, SwarmBudget
from inspect_swarm._runtime._hooks import metering
from inspect_swarm._runtime._meter import MemberOutcome, SwarmMeter
from inspect_swarm._runtime._sample_records import write_ledger
from inspect_swarm.scripted import scripted_model


class FakeHost:
    """The parts of the runtime's host the meter and its hooks use."""

    def __init__(self, meter: SwarmMeter, members: Sequence[str]) -> None:
        self.meter = meter
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

    def budget(self, member: str | None) -> SwarmBudget:
        return self.meter.view(member, self.clock())


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
        meter = SwarmMeter(budget, [(m, False) for m in members], list(models))
        host = FakeHost(meter, members)
        token = _context._swarm.set(host)  # type: ignore[arg-type]
        try:
            meter.open()
            store().set("test:caps", meter.caps.as_dict())
            with metering(host):  # type: ignore[arg-type]
                await body(host, model)
        except BaseException:
            host.interrupted = True
            raise
        finally:
            ledger = meter.ledger(
                members=list(host.outcomes.values()),
                stop_reason=host.stop_reason,
                ended_by=None,
                interrupted=host.interrupted,
                final_cancelled=host.final_cancelled,
                resumed=False,
                elapsed=host.clock(),
            )
            write_ledger(ledger)
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
