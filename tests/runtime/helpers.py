"""Small builders shared by the swarm tests: a task, a scripted model, and readers."""

import subprocess
import sys
from pathlib import Path
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.event import InfoEvent, timeline_build
from inspect_ai.log import EvalLog, EvalSample, read_eval_log
from inspect_ai.scorer import includes

from inspect_swarm import leaderless
from inspect_swarm.scripted import scripted_model

ROOT = Path(__file__).parents[2]

ALL_RUN = leaderless(stop_on_submission=False)
"""A controller that lets every member run until it ends."""


def task(solver: Any, *, target: str = "42", **kwargs: Any) -> Task:
    return Task(
        dataset=[Sample(input="What is six times seven?", target=target)],
        solver=solver,
        **{"scorer": includes(), **kwargs},
    )


def run(
    solver: Any,
    members: dict[str, Any],
    tmp_path: Path,
    *,
    task_args: dict[str, Any] | None = None,
    price: Any = ...,
    **eval_args: Any,
) -> EvalSample:
    """Run one sample with a scripted model; return the sample (asserting the eval ran)."""
    log = run_log(solver, members, tmp_path, task_args=task_args, price=price, **eval_args)
    assert log.samples
    return log.samples[0]


def run_log(
    solver: Any,
    members: dict[str, Any],
    tmp_path: Path,
    *,
    task_args: dict[str, Any] | None = None,
    price: Any = ...,
    **eval_args: Any,
) -> EvalLog:
    model = scripted_model({"members": members}, price=price)
    [log] = eval(
        task(solver, **(task_args or {})),
        model=model,
        log_dir=str(tmp_path),
        display="none",
        **eval_args,
    )
    return log


def result(sample: EvalSample) -> dict[str, Any]:
    record: dict[str, Any] = sample.store["inspect_swarm:result"]
    return record


def statuses(sample: EvalSample) -> dict[str, str | None]:
    return {m["name"]: m["status"] for m in result(sample)["members"]}


def ledger_member(sample: EvalSample, name: str) -> dict[str, Any]:
    return _named(sample.store["inspect_swarm:ledger"]["members"], name)


def metrics_member(sample: EvalSample, name: str) -> dict[str, Any]:
    return _named(sample.store["inspect_swarm:metrics"]["members"], name)


def _named(members: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(m for m in members if m["name"] == name)


def lanes(sample: EvalSample) -> list[str]:
    timeline = timeline_build(sample.events)
    found: list[str] = []

    def walk(node: Any) -> None:
        for child in getattr(node, "content", []):
            if getattr(child, "span_type", None) == "agent":
                found.append(child.name)
            walk(child)

    walk(timeline.root)
    return found


def info_events(sample: EvalSample, kind: str) -> list[InfoEvent]:
    """The swarm's info events of this type (`ledger`, `comm`...)."""
    return [
        e
        for e in sample.events
        if isinstance(e, InfoEvent)
        and e.source == "inspect_swarm"
        and isinstance(e.data, dict)
        and e.data.get("type") == kind
    ]


def infos(sample: EvalSample, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in info_events(sample, kind) if isinstance(e.data, dict)]


def cli_eval(script: Path, log_dir: Path, *solver_args: str) -> EvalLog:
    """Run the getting-started task's `product` sample with `inspect eval`, its solver the
    swarm with these `-S` arguments, on the scripted model with this script; the log, which
    must have succeeded."""
    command = [
        sys.executable, "-m", "inspect_ai._cli.main", "eval", "examples/getting_started.py",
        "--model", "scripted/demo", "-M", f"script={script}", "--solver", "inspect_swarm/swarm",
        *[arg for pair in solver_args for arg in ("-S", pair)],
        "--sample-id", "product", "--log-dir", str(log_dir), "--display", "none",
    ]  # fmt: skip
    # the timeout is a safety net: on a heavily loaded machine such a run has taken over 120 s
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    [path] = log_dir.glob("*.eval")
    log = read_eval_log(str(path))
    assert log.status == "success" and log.samples
    return log


def stop_reason(sample: EvalSample) -> str | None:
    """The swarm's stop reason, from its ledger."""
    reason: str | None = sample.store["inspect_swarm:ledger"]["stop_reason"]
    return reason
