"""A loaded machine, made on purpose: the script's members slowed, the first named the most.

A script that orders its members by `delay` (the first named answers first) gives another
result once the members it means to go first are the slow ones; a script ordered by `after:`
gives the same. `loaded(script)` adds to every step of the n-th of k names in each table
(`members`, and each sample's) a delay of (k - n + 1) * `step` seconds, so the order the
script is written in is turned around. The result must not depend on it, so a test that runs a
loaded script asserts the same result as the script itself, and fails on the first ordering
that a delay decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inspect_ai.log import EvalLog
from inspect_ai.model import Model

from inspect_swarm.scripted import Script, Step
from inspect_swarm.scripted._script import ScriptSource, load_script

STEP = 0.2
"""Seconds between the slowdowns of two names next to each other in a table."""


def loaded(script: ScriptSource, step: float = STEP) -> Script:
    """`script` with every member slowed, the first named in each table the most."""
    base = load_script(script)
    return base.model_copy(
        update={
            "members": _slowed(base.members, step),
            "samples": {sample: _slowed(table, step) for sample, table in base.samples.items()},
        }
    )


def _slowed(table: dict[str, list[Step]], step: float) -> dict[str, list[Step]]:
    k = len(table)
    return {
        name: [s.model_copy(update={"delay": s.delay + (k - n) * step}) for s in steps]
        for n, (name, steps) in enumerate(table.items())
    }


def loaded_model(real: Callable[..., Model]) -> Callable[..., Model]:
    """`scripted_model`, running each script `loaded()`: what a page's blocks call instead."""

    def scripted_model(script: ScriptSource, **kwargs: Any) -> Model:
        return real(loaded(script), **kwargs)

    return scripted_model


@dataclass(frozen=True)
class Outcome:
    """What a swarm's sample came to, without its times: the result to compare."""

    stop_reason: str | None
    member: str | None
    answer: str
    statuses: dict[str, str | None]


def outcome(log: EvalLog) -> dict[str, Outcome]:
    """Each sample's outcome, by sample id (and epoch, after the first)."""
    found = {}
    for s in log.samples or []:
        result = s.store["inspect_swarm:result"]
        key = str(s.id) if s.epoch == 1 else f"{s.id}/{s.epoch}"
        found[key] = Outcome(
            stop_reason=s.store["inspect_swarm:ledger"]["stop_reason"],
            member=result["final"]["member"],
            answer=s.output.completion,
            statuses={m["name"]: m["status"] for m in result["members"]},
        )
    return found
