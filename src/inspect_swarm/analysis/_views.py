"""The data behind the plots: a swarm's timeline and who read whose writes, from one sample's
events, and score against realized cost per arm, from a directory of logs."""

import math
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from inspect_ai.event import Event, InfoEvent, ModelEvent, SpanBeginEvent, ToolEvent
from inspect_ai.log import EvalSample
from inspect_ai.scorer import value_to_float

from .._contracts._schema import EVIDENCE_SOURCE
from ._read import SwarmSample, arm_order, read_swarm_samples

SpanKind: TypeAlias = Literal["model", "tool", "wait"]
MarkKind: TypeAlias = Literal["write", "read", "end"]


@dataclass(frozen=True)
class TimelineSpan:
    """Something a member did for a while: a model call, a tool call or a wait."""

    member: str
    """The member's name: its lane."""
    kind: SpanKind
    """`"model"`, `"tool"` or `"wait"`."""
    start: float
    """Seconds from the swarm's start."""
    end: float
    """Seconds from the swarm's start to the span's end."""
    label: str
    """The tool's name, or the model's."""


@dataclass(frozen=True)
class TimelineMark:
    """Something that happened to a member at one time: a board write or read, its end."""

    member: str
    """The member's name: its lane."""
    kind: MarkKind
    """`"write"`, `"read"` or `"end"`."""
    time: float
    """Seconds from the swarm's start."""
    label: str
    """The channel, for a write or read; how the member ended (its status), for its end."""


@dataclass(frozen=True)
class SwarmTimeline:
    """One swarm's run in time: a lane per member, the swarm's stop and its grace period."""

    members: list[str]
    """The lanes, in roster order."""
    spans: list[TimelineSpan]
    """What the members did for a while, in the order of the events that show it."""
    marks: list[TimelineMark]
    """What happened to the members at one time, in time order."""
    end: float
    """Seconds from the swarm's start to its end."""
    stop: float | None
    """When the swarm's stop began (`None` if it never did)."""
    stop_reason: str | None
    """Why the swarm stopped, as its stop event gives it (`None` if it never did)."""
    grace_end: float | None
    """When the grace period after the stop ran out, or the swarm ended, whichever came
    first."""


def _evidence(events: Iterable[Event], *types: str) -> list[tuple[InfoEvent, dict[str, Any]]]:
    """The swarm's record and evidence events of these types, with their data."""
    found = []
    for e in events:
        if isinstance(e, InfoEvent) and e.source == EVIDENCE_SOURCE and isinstance(e.data, dict):
            data: dict[str, Any] = e.data
            if data.get("type") in types:
                found.append((e, data))
    return found


def _swarm_events(sample: EvalSample) -> tuple[str, list[dict[str, Any]]]:
    """The swarm's span and its record events (the last swarm's, if the sample ran several)."""
    records = _evidence(sample.events, "result", "stop")
    span = records[-1][0].span_id if records else None
    if span is None:
        raise ValueError(
            f"sample {sample.id!r} (epoch {sample.epoch}) has no swarm: its events hold no "
            "swarm result. Choose a sample whose solver is a swarm."
        )
    return span, [data for e, data in records if e.span_id == span]


def _in_roster_order(members: list[str], sample: EvalSample, span: str) -> list[str]:
    """`members` in the order of the swarm's ledger, its roster: their spans begin in the order
    the members started, which the async backend decides (trio need not keep it)."""
    ledgers = [
        data["ledger"] for e, data in _evidence(sample.events, "ledger") if e.span_id == span
    ]
    if not ledgers:
        return members
    roster = [m["name"] for m in ledgers[-1]["members"]]
    return sorted(members, key=lambda name: roster.index(name) if name in roster else len(roster))


class _Lanes:
    """Which member each event belongs to, by its span, and its time from the swarm's start."""

    def __init__(self, sample: EvalSample, swarm_span: str) -> None:
        begins = {e.id: e for e in sample.events if isinstance(e, SpanBeginEvent)}
        self.t0 = begins[swarm_span].timestamp
        self.members = [
            b.name for b in begins.values() if b.parent_id == swarm_span and b.type == "agent"
        ]
        self._member_of: dict[str, str] = {}
        for span_id in begins:
            member = self._find(span_id, begins, swarm_span)
            if member is not None:
                self._member_of[span_id] = member

    def _find(self, span_id: str, begins: dict[str, SpanBeginEvent], swarm: str) -> str | None:
        while span_id in begins:
            begin = begins[span_id]
            if begin.parent_id == swarm:
                return begin.name if begin.type == "agent" else None
            if begin.parent_id is None:
                return None
            span_id = begin.parent_id
        return None

    def member(self, event: Event) -> str | None:
        return None if event.span_id is None else self._member_of.get(event.span_id)

    def at(self, event: Event) -> float:
        return round((event.timestamp - self.t0).total_seconds(), 3)


def swarm_timeline(sample: EvalSample) -> SwarmTimeline:
    """The data of `plot_timeline()`: what each member did and when, and the swarm's stop.

    Args:
        sample: A sample read with its events, such as `read_eval_log_sample()` returns.

    Raises:
        ValueError: The sample ran no swarm.
    """
    span, records = _swarm_events(sample)
    lanes = _Lanes(sample, span)
    ends = {r["member"]: r for r in records if r.get("kind") == "member_result"}
    end = max((r["time"] for r in ends.values() if r["time"] is not None), default=0.0)
    spans: list[TimelineSpan] = []
    marks: list[TimelineMark] = []
    for event in sample.events:
        member = lanes.member(event)
        if member is None:
            continue
        spans.extend(_spans(event, member, lanes, ends))
        marks.extend(_comm_marks(event, member, lanes))
    marks.extend(
        TimelineMark(name, "end", r["time"], r["status"] or "never started")
        for name, r in ends.items()
        if r["time"] is not None
    )
    stop = next((r for r in records if r["type"] == "stop"), None)
    stop_time = None if stop is None else float(stop["time"])
    return SwarmTimeline(
        members=_in_roster_order(lanes.members, sample, span),
        spans=spans,
        marks=sorted(marks, key=lambda m: (m.time, m.member)),
        end=end,
        stop=stop_time,
        stop_reason=None if stop is None else stop["reason"],
        grace_end=None if stop is None else min(float(stop["time"] + stop["grace"]), end),
    )


def _spans(
    event: Event, member: str, lanes: _Lanes, ends: dict[str, dict[str, Any]]
) -> Iterator[TimelineSpan]:
    if not isinstance(event, ModelEvent | ToolEvent):
        return
    if isinstance(event, ToolEvent) and event.function == "submit":
        return
    start = lanes.at(event)
    # a call the swarm cancelled never completed: it lasted until its member's end
    end = (
        round((event.completed - lanes.t0).total_seconds(), 3)
        if event.completed is not None
        else ends.get(member, {}).get("time") or start
    )
    if isinstance(event, ModelEvent):
        yield TimelineSpan(member, "model", start, end, event.model)
    else:
        kind: SpanKind = "wait" if event.function == "swarm_wait" else "tool"
        yield TimelineSpan(member, kind, start, end, event.function)


def _comm_marks(event: Event, member: str, lanes: _Lanes) -> Iterator[TimelineMark]:
    for _, data in _evidence([event], "comm"):
        channel = str(data.get("channel"))
        if data.get("kind") == "delivered":
            yield TimelineMark(member, "write", lanes.at(event), channel)
        elif data.get("kind") == "read" and not data.get("listing"):
            yield TimelineMark(member, "read", lanes.at(event), channel)


def comm_reads(sample: EvalSample) -> dict[tuple[str, str], int]:
    """The data of `plot_comm()`: how many times each member read another's writes.

    A read counts once for each record its evidence names (a board view counts each file
    version it showed, by the member whose write made it). A member's reads of its own
    writes are left out.

    Args:
        sample: A sample read with its events.

    Returns:
        Reads keyed by (writer, reader).
    """
    _swarm_events(sample)
    comm = [data for _, data in _evidence(sample.events, "comm")]
    writer = {d["record"]: d["member"] for d in comm if d.get("kind") == "delivered"}
    reads: Counter[tuple[str, str]] = Counter()
    for d in comm:
        if d.get("kind") != "read":
            continue
        for record in _records_named(d):
            author = writer.get(record)
            if author is not None and author != d["member"]:
                reads[(author, d["member"])] += 1
    return dict(sorted(reads.items()))


def _records_named(data: Any) -> Iterator[str]:
    """Every record id a piece of evidence names (`record`, at any depth)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "record" and isinstance(value, str):
                yield value
            else:
                yield from _records_named(value)
    elif isinstance(data, list):
        for item in data:
            yield from _records_named(item)


@dataclass(frozen=True)
class SweepArm:
    """One arm of a sweep: its samples' scores and realized costs."""

    arm: dict[str, Any]
    """The eval's task and solver arguments that set the arm apart."""
    label: str
    """The arm's arguments in one short line, for a legend."""
    scores: list[float]
    """Each sample's score (every epoch), in the logs' order."""
    costs: list[float]
    """Each sample's realized cost in dollars, from its `model_usage`."""
    complete: bool
    """No sample's cost is known to be a lower bound."""

    @property
    def score(self) -> float:
        """The mean score over the arm's samples (NaN with none)."""
        return statistics.fmean(self.scores) if self.scores else math.nan

    @property
    def cost(self) -> float:
        """The mean realized cost in dollars over the arm's samples (NaN with none)."""
        return statistics.fmean(self.costs) if self.costs else math.nan

    @property
    def score_spread(self) -> float:
        """The standard deviation of the scores (0 for one sample)."""
        return statistics.pstdev(self.scores) if self.scores else math.nan

    @property
    def cost_spread(self) -> float:
        """The population standard deviation of the arm's costs (NaN with none)."""
        return statistics.pstdev(self.costs) if self.costs else math.nan


def sweep_arms(
    logs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    scorer: str | None = None,
    key: str = "answer",
) -> list[SweepArm]:
    """The data of `plot_sweep()`: each arm's scores and realized costs.

    An arm is the set of task and solver arguments its eval ran with (`-T k=8 -T budget=8`);
    its samples are pooled over every log and epoch with those arguments.

    Args:
        logs: A log, a directory of logs, or several.
        scorer: The scorer whose score to use (default: each sample's first).
        key: For a scorer with a dict value (such as `member_scores()`), the key to use.

    Returns:
        The arms, in the order of their arguments (numbers by value).

    Raises:
        ValueError: The logs hold more than one task, or `scorer` scored none of the samples.
    """
    paths = [logs] if isinstance(logs, str | os.PathLike) else list(logs)
    samples = [s for path in paths for s in read_swarm_samples(path)]
    _check_one_task(samples)
    _check_scorer(samples, scorer)
    by_arm: dict[str, list[SwarmSample]] = defaultdict(list)
    for s in samples:
        by_arm[_label(s.arm)].append(s)
    arms = []
    for label, group in by_arm.items():
        scored = [(v, s) for s in group if (v := _score(s, scorer, key)) is not None]
        arms.append(
            SweepArm(
                arm=group[0].arm,
                label=label,
                scores=[v for v, _ in scored],
                costs=[s.cost for _, s in scored],
                complete=all(s.cost_complete for _, s in scored),
            )
        )
    return sorted(arms, key=lambda a: arm_order(a.arm))


def _check_one_task(samples: list[SwarmSample]) -> None:
    """Refuse logs of different tasks: their samples are no arms of one sweep."""
    tasks = sorted({s.task for s in samples})
    if len(tasks) > 1:
        raise ValueError(
            f"sweep: the logs hold {len(tasks)} tasks ({', '.join(tasks)}), and a sweep compares "
            "arms of one task. Give the logs of one task (a directory of its own, or its files)."
        )


def _check_scorer(samples: list[SwarmSample], scorer: str | None) -> None:
    """Refuse a scorer no sample has: every arm would come back with no scores."""
    names = {name for s in samples for name in s.scores or {}}
    if scorer is not None and samples and scorer not in names:
        raise ValueError(
            f"sweep_arms(scorer=...): no sample was scored by {scorer!r}. Name one of the "
            f"logs' scorers ({', '.join(sorted(names)) or 'none'}), or None for each sample's "
            "first."
        )


def _label(arm: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in arm.items()) or "(no arguments)"


def _score(s: SwarmSample, scorer: str | None, key: str) -> float | None:
    if not s.scores:
        return None
    score = s.scores.get(scorer) if scorer is not None else next(iter(s.scores.values()))
    if score is None:
        return None
    value = score.get("value")
    if isinstance(value, dict):
        value = value.get(key)
    return None if value is None else value_to_float()(value)
