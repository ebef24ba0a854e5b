"""What the swarm leaves in the sample: its result, ledger and metrics records, each in the store
and logged as an InfoEvent, and the `result` events of how members ended and the answer.

Each record is a projection of the members' state (`MemberRun`), the meter's ledger and the
bus; this module is the one place that writes them.
"""

from collections.abc import Sequence
from typing import Any, Literal

from inspect_ai.log import transcript
from inspect_ai.util import store

from .._contracts._schema import (
    EVIDENCE_SOURCE,
    LEDGER_KEY,
    METRICS_KEY,
    RESULT_KEY,
    SwarmLedger,
)
from ._answer import Answer
from ._bus._bus import SwarmBus
from ._member_run import MemberRun

# communication through files is observed, not recorded: without a channel that records,
# there is nothing to count, which is not the same as zero
_NO_CHANNEL_METRICS: dict[str, Any] = {
    "comm": {},
    "waits": None,
    "waits_by_outcome": None,
    "wait_time": None,
    "idle_time": None,
}


def result_record(
    members: Sequence[MemberRun], answer: Answer, provisional: bool
) -> dict[str, Any]:
    return {
        "version": 1,
        "members": [m.record() for m in members],
        "final": answer.record(provisional),
    }


def write_result(members: Sequence[MemberRun], answer: Answer, provisional: bool) -> None:
    """Write the result record (provisional until the swarm ends) to the sample store."""
    store().set(RESULT_KEY, result_record(members, answer, provisional))


def log_result(kind: Literal["member_result", "final"], data: dict[str, Any]) -> None:
    """Log a result of the swarm (the answer it settled, or how a member ended) as an InfoEvent."""
    transcript().info({"type": "result", "kind": kind, **data}, source=EVIDENCE_SOURCE)


def write_ledger(ledger: SwarmLedger) -> None:
    """Write the ledger to the sample store and log it as an `inspect_swarm` InfoEvent."""
    data = ledger.model_dump(mode="json")
    store().set(LEDGER_KEY, data)
    transcript().info({"type": "ledger", "ledger": data}, source=EVIDENCE_SOURCE)


def write_metrics(metrics: dict[str, Any]) -> None:
    """Write the metrics record to the sample store and log it as an `inspect_swarm` InfoEvent."""
    store().set(METRICS_KEY, metrics)
    transcript().info({"type": "metrics", "metrics": metrics}, source=EVIDENCE_SOURCE)


def metrics_record(
    members: Sequence[MemberRun],
    bus: SwarmBus | None,
    answer: Answer,
    ledger: SwarmLedger,
    wall_clock: float,
) -> dict[str, Any]:
    entries = []
    for m, entry in zip(members, ledger.members, strict=True):
        entries.append(
            {
                "name": m.name,
                "tokens": entry.meter.usage.total_tokens,
                "cost": entry.meter.cost,
                "running_time": None
                if m.start_time is None or m.end_time is None
                else round(m.end_time - m.start_time, 3),
                "steps": m.steps,
                "longest_identical_tool_run": None if m.spec.bridged else m.longest_tool_run,
                "gate_checks": m.gate_checks,
                "gate_passes": m.gate_passes,
                "first_pass_time": m.first_pass_time,
                "delivery_effective": m.spec.delivery,
                **(bus.member_metrics(m.name) if bus is not None else _NO_CHANNEL_METRICS),
            }
        )
    wiring = bus.wiring() if bus is not None else {}
    return {
        "version": 1,
        "tokens": ledger.swarm.usage.total_tokens,
        "cost": ledger.swarm.cost,
        "wall_clock": round(wall_clock, 3),
        "never_acted": [m.name for m in members if m.steps == 0],
        "steps_to_answer": None if answer.member is None else answer.member.steps,
        "longest_member_steps": max((m.steps for m in members), default=0),
        "members": entries,
        "notify_unwired": wiring.get("notify_unwired", []),
        "tools_unwired": wiring.get("tools_unwired", []),
    }
