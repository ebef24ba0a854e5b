"""What the swarm leaves in the sample: its result, ledger and metrics records, each in the store
and logged as an InfoEvent; the `result` events of how members ended and the answer, and the
`stop` event; the `submissions` event with the outputs of the members that submitted; and, for people, the summary in Markdown and the
words that end each member's timeline.

The summary is the swarm's first event: a pending InfoEvent logged when the swarm starts and
filled in when it ends, so a viewer shows it above the members' lanes and the raw records.

Each record is a projection of the members' state (`MemberRun`), the meter's ledger and the
bus; this module is the one place that writes them.
"""

import logging
from collections.abc import Sequence
from typing import Any, Literal

from inspect_ai.event import InfoEvent
from inspect_ai.log import transcript
from inspect_ai.log._samples import sample_active
from inspect_ai.util import store
from pydantic import JsonValue

from .._contracts._schema import (
    ENDED_SOURCE,
    EVIDENCE_SOURCE,
    LEDGER_KEY,
    METRICS_KEY,
    RESULT_KEY,
    SUMMARY_SOURCE,
    SwarmLedger,
)
from .._contracts._summary import SwarmSummary, summary_markdown
from ._answer import Answer
from ._bus._bus import SwarmBus
from ._member_run import MemberRun

_logger = logging.getLogger(__name__)

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


def write_result(members: Sequence[MemberRun], answer: Answer, provisional: bool) -> dict[str, Any]:
    """Write the result record (provisional until the swarm ends) to the sample store."""
    record = result_record(members, answer, provisional)
    store().set(RESULT_KEY, record)
    return record


def log_result(kind: Literal["member_result", "final"], data: dict[str, Any]) -> None:
    """Log a result of the swarm (the answer it settled, or how a member ended) as an InfoEvent."""
    transcript().info({"type": "result", "kind": kind, **data}, source=EVIDENCE_SOURCE)


def log_stop(data: dict[str, Any]) -> None:
    """Log the start of the swarm's stop (its reason, time and grace) as an InfoEvent."""
    transcript().info({"type": "stop", **data}, source=EVIDENCE_SOURCE)


def log_member_end(words: str) -> None:
    """End a member's timeline (call in its span) with how it ended, in words."""
    transcript().info(words, source=ENDED_SOURCE)


_SUMMARY_PENDING = "*The swarm is running: its summary comes here when it ends.*"


def open_summary() -> InfoEvent:
    """Log the summary's InfoEvent, pending, as the swarm's first event."""
    event = InfoEvent(source=SUMMARY_SOURCE, data=_SUMMARY_PENDING, pending=True)
    transcript()._event(event)
    return event


def log_summary(event: InfoEvent, summary: SwarmSummary) -> None:
    """Fill in the summary's event (from `open_summary()`) with the swarm's summary, in
    Markdown (the viewer renders it); and log a warning, which the console shows, when the
    swarm or a member reached a cap or share."""
    event.data = summary_markdown(summary)
    event.pending = None
    transcript()._event_updated(event)
    if summary.reached:
        active = sample_active()
        where = "" if active is None else f"sample {active.sample.id} (epoch {active.epoch}): "
        reached = "; ".join(r.words() for r in summary.reached)
        _logger.warning(f"inspect_swarm: {where}{reached}.")


def write_ledger(data: dict[str, Any]) -> None:
    """Write the ledger (as JSON) to the sample store and log it as an `inspect_swarm`
    InfoEvent."""
    store().set(LEDGER_KEY, data)
    transcript().info({"type": "ledger", "ledger": data}, source=EVIDENCE_SOURCE)


def write_metrics(metrics: dict[str, Any]) -> None:
    """Write the metrics record to the sample store and log it as an `inspect_swarm` InfoEvent."""
    store().set(METRICS_KEY, metrics)
    transcript().info({"type": "metrics", "metrics": metrics}, source=EVIDENCE_SOURCE)


def log_submissions(members: Sequence[MemberRun]) -> None:
    """Log each submitting member's output as an `inspect_swarm` InfoEvent, once every member
    has ended (while members run, nothing the swarm writes holds another member's answer)."""
    outputs: dict[str, JsonValue] = {
        m.name: m.output.model_dump(mode="json", exclude_none=True)
        for m in members
        if m.submitted and m.output is not None
    }
    transcript().info({"type": "submissions", "outputs": outputs}, source=EVIDENCE_SOURCE)


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
                "submissions": m.submissions,
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
