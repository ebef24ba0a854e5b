"""The metrics record (`inspect_swarm:metrics`), written when the swarm ends."""

from typing import TYPE_CHECKING, Any

from ._ledger import SwarmLedger
from ._record import Answer

if TYPE_CHECKING:
    from ._run import SwarmRun

# communication through files is observed, not recorded: without a channel that records,
# there is nothing to count, which is not the same as zero
_NO_CHANNEL_METRICS: dict[str, Any] = {
    "comm": {},
    "waits": None,
    "waits_by_outcome": None,
    "wait_time": None,
    "idle_time": None,
}


def metrics_record(run: "SwarmRun", answer: Answer, ledger: SwarmLedger) -> dict[str, Any]:
    steps = run.observer.steps
    members = []
    for m, entry in zip(run.member_runs, ledger.members, strict=True):
        members.append(
            {
                "name": m.name,
                "tokens": entry.meter.usage.total_tokens,
                "cost": entry.meter.cost,
                "running_time": None
                if m.start_time is None or m.end_time is None
                else round(m.end_time - m.start_time, 3),
                "steps": steps.get(m.name, 0),
                "longest_identical_tool_run": None
                if m.spec.bridged
                else run.observer.tool_runs.get(m.name, 0),
                "gate_checks": m.gate_checks,
                "gate_passes": m.gate_passes,
                "first_pass_time": m.first_pass_time,
                "delivery_effective": m.spec.delivery,
                **(run.bus.member_metrics(m.name) if run.bus is not None else _NO_CHANNEL_METRICS),
            }
        )
    wiring = run.bus.wiring() if run.bus is not None else {}
    return {
        "version": 1,
        "tokens": ledger.swarm.usage.total_tokens,
        "cost": ledger.swarm.cost,
        "wall_clock": round(run.clock(), 3),
        "never_acted": [m.name for m in run.member_runs if steps.get(m.name, 0) == 0],
        "steps_to_answer": None if answer.member is None else steps.get(answer.member.name, 0),
        "longest_member_steps": max((steps.get(m.name, 0) for m in run.member_runs), default=0),
        "members": members,
        "notify_unwired": wiring.get("notify_unwired", []),
        "tools_unwired": wiring.get("tools_unwired", []),
    }
