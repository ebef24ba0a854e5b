"""What the swarm learns of each member from the sample's transcript: its steps, its runs of
identical tool calls and its in-loop checks, written to the member's `MemberRun`."""

from collections.abc import Callable

from inspect_ai.event import ModelEvent, ScoreEvent, ToolEvent
from inspect_ai.scorer import value_to_float
from inspect_ai.scorer._score import _scorers
from inspect_ai.scorer._scorer import unique_scorer_name
from inspect_ai.util._span import current_agent_span_id

from ._member_run import MemberRun


class SwarmObserver:
    """Counts each member's steps, identical tool runs and in-loop checks.

    The transcript tap calls it synchronously in the emitting task, once per completed event,
    with the member the event belongs to (its subagents and background work included).
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._gate_scorer: str | None = None
        self._to_float = value_to_float()

    def open(self) -> None:
        scorers = _scorers.get(None)
        self._gate_scorer = unique_scorer_name(scorers[0], []) if scorers else None

    def model(self, m: MemberRun, event: ModelEvent) -> None:
        if event.error is None and event.output is not None and event.output.choices:
            m.steps += 1

    def tool(self, m: MemberRun, event: ToolEvent) -> None:
        call = (event.function, repr(sorted(event.arguments.items())))
        m.tool_run = m.tool_run + 1 if m.last_call == call else 1
        m.last_call = call
        m.longest_tool_run = max(m.longest_tool_run, m.tool_run)

    def score(self, m: MemberRun, event: ScoreEvent) -> None:
        if not event.intermediate or event.scorer != self._gate_scorer:
            return
        if current_agent_span_id() != m.span_id:
            return  # a check in a subagent's loop is not the member's own
        m.gate_checks += 1
        if self._to_float(event.score.value) == 1.0:
            m.gate_passes += 1
            if m.first_pass_time is None:
                m.first_pass_time = round(self._clock(), 3)
