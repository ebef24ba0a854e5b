"""The script that replays a logged sample: each member's model outputs, released in the order
of the effects that decided the outcome."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, get_args

from inspect_ai.event import Event, InfoEvent, ModelEvent, SpanBeginEvent, ToolEvent
from inspect_ai.log import EvalLog, EvalSample, read_eval_log
from inspect_ai.model import ModelUsage
from inspect_ai.tool import ToolCall

from .._contracts._schema import EVIDENCE_SOURCE
from .._contracts._status import StopCause
from ._script import MAIN, Hold, Script, ScriptPrice, ScriptUsage, Step, StepCall, StepUsage

_SUBMIT = "submit"


def _literals(kind: Any) -> set[str]:
    args = get_args(kind)
    return {a for a in args if isinstance(a, str)} | {v for a in args for v in _literals(a)}


_STOP_CAUSES = _literals(StopCause)

# below this, the calls' input and output tokens are taken as proportional (no unique price)
_SINGULAR = 1e-9


@dataclass
class _Call:
    """One logged model call of a lane (a member, or `main`)."""

    event: ModelEvent
    tools: list[ToolEvent] = field(default_factory=list)
    """The tool calls it asked for, as they ran."""

    @property
    def start(self) -> datetime:
        return self.event.timestamp

    @property
    def end(self) -> datetime | None:
        return None if self.event.pending else self.event.completed

    @property
    def done(self) -> datetime | None:
        """When the call and every tool call it asked for had finished (None: never)."""
        ends = [self.end, *(tool.completed for tool in self.tools)]
        if any(end is None for end in ends):
            return None
        return max(end for end in ends if end is not None)


@dataclass
class _Lane:
    """The calls of one member (or of `main`) and when the member ended."""

    calls: list[_Call] = field(default_factory=list)
    ended: datetime | None = None
    stopped: bool = False
    """The swarm ended the member (its stop, a cap, a share or a metered limit), so the call
    after its last one, if it made one, was refused."""

    def progress(self, moment: datetime) -> int:
        """What a step released at `moment` waits for: how many calls this lane must have
        begun (one more than it made: its end), so that all it did before `moment` is done."""
        begun = sum(call.start < moment for call in self.calls)
        if self.ended is not None and self.ended <= moment:
            return begun + 1
        last_done = self.calls[begun - 1].done if begun else None
        if last_done is not None and last_done <= moment and begun < len(self.calls):
            return begun + 1
        return begun


def replay_script(
    log: str | os.PathLike[str] | EvalLog, *, sample: str | int | None = None, epoch: int = 1
) -> Script:
    """The scripted model's script that replays a logged swarm.

    Each member's logged model calls become its steps in the sample's table: the text, tool
    calls (a `submit` call as `submit`), stop reason, usage or error of each, a call that
    never returned as `hang`. Each step waits (`after`) until what its call had seen in the
    log has happened again: the calls other members had begun or finished, their ends and
    the swarm's stop. A member the swarm stopped is refused the call after its last
    (`refused`), as it was. Running the task on `scripted/<name>` with the script then gives
    the same transcripts, statuses, answer and records, on any machine, with no delays.

    Args:
        log: The log (its path, or one read with its samples).
        sample: The sample to replay (default: every sample of the log).
        epoch: The epoch to replay of each sample.

    Returns:
        The script, with one table per sample under `samples`, and the usage and price of the
        logged model (the script's own, when the log was made with the scripted model).

    Raises:
        ValueError: The log has no such sample or epoch.
    """
    read = log if isinstance(log, EvalLog) else read_eval_log(str(log))
    location = read.location or "the log"
    samples = [
        s
        for s in read.samples or []
        if s.epoch == epoch and (sample is None or str(s.id) == str(sample))
    ]
    if not samples:
        which = "samples" if sample is None else f"sample {str(sample)!r}"
        raise ValueError(
            f"replay_script: {location} has no {which} in epoch {epoch}: choose a sample and "
            "epoch the log holds (`inspect-swarm show LOG` lists them)."
        )
    tables = {str(s.id): sample_steps(s) for s in samples}
    calls = [e for s in samples for e in s.events if isinstance(e, ModelEvent)]
    usage = _common_usage(
        step for table in tables.values() for steps in table.values() for step in steps
    )
    return Script(
        samples={
            sample_id: {
                name: [_without_usage(step, usage) for step in steps]
                for name, steps in table.items()
            }
            for sample_id, table in tables.items()
        },
        usage=usage,
        price=_price(calls),
    )


def sample_steps(sample: EvalSample) -> dict[str, list[Step]]:
    """The steps of each member (and of `main`, the calls outside every member) that replay
    one logged sample; see `replay_script()`."""
    lanes = _lanes(sample.events)
    stop = _stop_time(sample.events)
    table: dict[str, list[Step]] = {}
    for name, lane in lanes.items():
        others = {other: lanes[other] for other in lanes if other != name}
        table[name] = _lane_steps(lane, others, stop)
    return table


def _lane_steps(lane: _Lane, others: dict[str, _Lane], stop: datetime | None) -> list[Step]:
    steps: list[Step] = []
    waited: dict[str, int] = {}
    stopped = False
    for call in lane.calls:
        if call.end is None:
            steps.append(Step(hang=True))
            continue
        # a member's last call that only submits ends its run (or turn): its agent returns
        # after those of the members whose last submissions were done before its own, and
        # after the stop that came before its end, so the first and the last are the log's
        submits = call is lane.calls[-1] and _only_submits(call.event)
        ends = lane.ended if submits else None
        after = {}
        for other, other_lane in others.items():
            progress = other_lane.progress(call.end)
            if submits and _submitted_before(other_lane, call):
                progress = len(other_lane.calls) + 1
            if progress > waited.get(other, 0):
                after[other] = waited[other] = progress
        after_stop = stop is not None and stop <= (ends or call.end) and not stopped
        stopped = stopped or after_stop
        steps.append(_step(call.event, Hold(stop=after_stop, calls=after)))
    if lane.stopped and lane.calls and lane.calls[-1].end is not None:
        steps.append(Step(refused=True))
    return steps


def _submitted_before(lane: _Lane, call: _Call) -> bool:
    """Whether the lane's last call only submitted, and was done before `call` was."""
    last = lane.calls[-1] if lane.calls else None
    if last is None or lane.ended is None or not _only_submits(last.event):
        return False
    return last.done is not None and call.done is not None and last.done <= call.done


def _only_submits(event: ModelEvent) -> bool:
    return all(call.function == _SUBMIT for call in event.output.message.tool_calls or [])


def _step(event: ModelEvent, hold: Hold) -> Step:
    fields: dict[str, Any] = {"after": hold.after()}
    if event.error is not None:
        return Step(error=event.error, **fields)
    output = event.output
    fields.update(_tool_fields(output.message.tool_calls or []))
    if output.message.text:
        fields["text"] = output.message.text
    default_stop = "tool_calls" if output.message.tool_calls else "stop"
    if output.stop_reason != default_stop or not (output.message.text or output.message.tool_calls):
        fields["stop_reason"] = output.stop_reason
    if output.usage is not None:
        fields["usage"] = _usage(output.usage)
    return Step(**fields)


def _tool_fields(calls: list[ToolCall]) -> dict[str, Any]:
    if not calls:
        return {}
    if len(calls) > 1:
        return {"calls": [StepCall(tool=c.function, arguments=c.arguments) for c in calls]}
    [call] = calls
    answer = call.arguments.get("answer")
    if call.function == _SUBMIT and set(call.arguments) == {"answer"} and isinstance(answer, str):
        return {"submit": answer}
    return {"tool": call.function, "arguments": call.arguments}


def _usage(usage: ModelUsage) -> StepUsage:
    # cache reads and writes count as input, so each call's total tokens stay as logged
    return StepUsage(
        input_tokens=usage.total_tokens - usage.output_tokens, output_tokens=usage.output_tokens
    )


def _common_usage(steps: Any) -> ScriptUsage:
    counted = Counter(
        (step.usage.input_tokens, step.usage.output_tokens)
        for step in steps
        if step.usage is not None
    )
    if not counted:
        return ScriptUsage()
    (input_tokens, output_tokens), _ = counted.most_common(1)[0]
    return ScriptUsage(input_tokens=input_tokens, output_tokens=output_tokens)


def _without_usage(step: Step, usage: ScriptUsage) -> Step:
    """The step, without its usage when the script's gives the same."""
    if step.usage is None:
        return step
    same = (step.usage.input_tokens, step.usage.output_tokens) == (
        usage.input_tokens,
        usage.output_tokens,
    )
    return step.model_copy(update={"usage": None}) if same else step


def _price(events: list[ModelEvent]) -> ScriptPrice | None:
    """The price that gives each logged call its logged cost, fitted (least squares) to the
    calls' input and output tokens; `None` when no call had a cost (an unpriced model)."""
    priced = [
        (usage.total_tokens - usage.output_tokens, usage.output_tokens, usage.total_cost)
        for usage in (e.output.usage for e in events if not e.pending)
        if usage is not None and usage.total_cost is not None
    ]
    if not priced:
        return None
    ii = sum(i * i for i, _, _ in priced)
    io = sum(i * o for i, o, _ in priced)
    oo = sum(o * o for _, o, _ in priced)
    ic = sum(i * c for i, _, c in priced)
    oc = sum(o * c for _, o, c in priced)
    det = ii * oo - io * io
    if det > _SINGULAR * ii * oo:
        per_input, per_output = (ic * oo - io * oc) / det, (ii * oc - io * ic) / det
    else:
        # every call used tokens in the same proportion: one rate for both prices them all
        per_input = per_output = (ic + oc) / max(ii + 2 * io + oo, 1)
    return ScriptPrice(input=_per_million(per_input), output=_per_million(per_output))


def _per_million(per_token: float) -> float:
    return max(0.0, float(f"{per_token * 1e6:.10g}"))


def _lanes(events: list[Event]) -> dict[str, _Lane]:
    """Each member's logged calls, with the tool calls they asked for, and the calls outside
    every member (`main`)."""
    member_of = _member_spans(events)
    lanes: dict[str, _Lane] = {}
    for event in events:
        name = member_of.get(event.span_id or "", MAIN)
        if isinstance(event, ModelEvent):
            lanes.setdefault(name, _Lane()).calls.append(_Call(event))
        elif isinstance(event, ToolEvent) and name in lanes and lanes[name].calls:
            lanes[name].calls[-1].tools.append(event)
        elif (ended := _evidence(event, "member_result")) is not None:
            lane = lanes.setdefault(str(ended["member"]), _Lane())
            lane.ended, lane.stopped = event.timestamp, ended.get("status") in _STOP_CAUSES
    return {name: lane for name, lane in lanes.items() if lane.calls}


def _member_spans(events: list[Event]) -> dict[str, str]:
    """The member each span belongs to: every span inside a member's own agent span."""
    begins = {e.id: e for e in events if isinstance(e, SpanBeginEvent)}
    swarms = {e.span_id for e in events if _evidence(e, "result") is not None}
    member_of: dict[str, str] = {}
    for span_id in begins:
        found = span_id
        while found in begins and begins[found].parent_id not in swarms:
            found = begins[found].parent_id or ""
        if found in begins and begins[found].type == "agent":
            member_of[span_id] = begins[found].name
    return member_of


def _stop_time(events: list[Event]) -> datetime | None:
    return next((e.timestamp for e in events if _evidence(e, "stop") is not None), None)


def _evidence(event: Event, kind: str) -> dict[str, Any] | None:
    """The data of one of the swarm's records of this type or kind, else None."""
    if not isinstance(event, InfoEvent) or event.source != EVIDENCE_SOURCE:
        return None
    data = event.data
    if isinstance(data, dict) and kind in (data.get("type"), data.get("kind")):
        return data
    return None
