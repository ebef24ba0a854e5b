"""What the swarm learns of each member from the sample's transcript: its steps, its runs of
identical tool calls and its checks, written to the member's `MemberRun`."""

from collections.abc import Callable

from inspect_ai.event import ModelEvent, ScoreEvent, ToolEvent
from inspect_ai.scorer import Score, value_to_float
from inspect_ai.scorer._score import _scorers
from inspect_ai.scorer._scorer import unique_scorer_name
from inspect_ai.util._span import current_agent_span_id

from ._member_run import MemberRun


class SwarmObserver:
    """Counts each member's steps, identical tool runs and in-loop checks.

    The transcript tap calls it synchronously in the emitting task, once per completed event,
    with the member the event belongs to (its subagents and background work included).
    """

    def __init__(self, clock: Callable[[], float], on_step: Callable[[MemberRun], None]) -> None:
        self._clock = clock
        self._on_step = on_step
        self._gate_scorer: str | None = None
        self._to_float = value_to_float()

    def open(self) -> None:
        scorers = _scorers.get(None)
        self._gate_scorer = unique_scorer_name(scorers[0], []) if scorers else None

    def model(self, m: MemberRun, event: ModelEvent) -> None:
        if event.error is None and event.output is not None and event.output.choices:
            m.steps += 1
            self._on_step(m)

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
        passed = self.passes(event.score)
        self.check(m, passed)
        if not passed:
            m.submissions += 1  # the loop goes on; a pass ends it, and counts as it returns

    def passes(self, score: Score | None) -> bool:
        """Whether a check's score is a pass: 1.0 under Inspect's default converter."""
        return score is not None and self._to_float(score.value) == 1.0

    def check(self, m: MemberRun, passed: bool) -> None:
        """Count a check of the member's submission, in its loop or by the controller."""
        m.gate_checks += 1
        if passed:
            m.gate_passes += 1
            if m.first_pass_time is None:
                m.first_pass_time = round(self._clock(), 3)
