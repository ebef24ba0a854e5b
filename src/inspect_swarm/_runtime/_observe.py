"""What the swarm learns from the sample's transcript as events happen, attributed by member."""

from collections.abc import Callable, Mapping

from inspect_ai.event import Event, ModelEvent, ScoreEvent, ToolEvent
from inspect_ai.scorer import value_to_float
from inspect_ai.scorer._score import _scorers
from inspect_ai.scorer._scorer import unique_scorer_name
from inspect_ai.util._span import current_agent_span_id

from .._context import current_member
from ._member_run import MemberRun


class SwarmObserver:
    """Counts each member's steps, identical tool runs and in-loop checks.

    Called synchronously in the emitting task, so `current_member()` names the member (its
    subagents and background work included). Inspect delivers an event more than once as it
    completes, so each is counted once, by uuid, when complete.
    """

    def __init__(self, members: Mapping[str, MemberRun], clock: Callable[[], float]) -> None:
        self._members = members
        self._clock = clock
        self._seen: set[str] = set()
        self.steps: dict[str, int] = {}
        self.tool_runs: dict[str, int] = {}
        self._last_call: dict[str, tuple[str, str]] = {}
        self._current_run: dict[str, int] = {}
        self._gate_scorer: str | None = None
        self._to_float = value_to_float()

    def open(self) -> None:
        scorers = _scorers.get(None)
        self._gate_scorer = unique_scorer_name(scorers[0], []) if scorers else None

    def on_event(self, event: Event) -> None:
        member = current_member()
        if member is None or getattr(event, "pending", None) or event.uuid in self._seen:
            return
        if isinstance(event, ModelEvent):
            if event.error is None and event.output is not None and event.output.choices:
                self._seen.add(event.uuid or "")
                self.steps[member] = self.steps.get(member, 0) + 1
        elif isinstance(event, ToolEvent):
            self._seen.add(event.uuid or "")
            self._tool(member, event)
        elif isinstance(event, ScoreEvent) and event.intermediate:
            self._seen.add(event.uuid or "")
            self._gate(member, event)

    def _tool(self, member: str, event: ToolEvent) -> None:
        call = (event.function, repr(sorted(event.arguments.items())))
        run = self._current_run.get(member, 0) + 1 if self._last_call.get(member) == call else 1
        self._last_call[member] = call
        self._current_run[member] = run
        self.tool_runs[member] = max(self.tool_runs.get(member, 0), run)

    def _gate(self, member: str, event: ScoreEvent) -> None:
        if event.scorer != self._gate_scorer:
            return
        m = self._members.get(member)
        if m is None or current_agent_span_id() != m.span_id:
            return  # a check in a subagent's loop is not the member's own
        m.gate_checks += 1
        if self._to_float(event.score.value) == 1.0:
            m.gate_passes += 1
            if m.first_pass_time is None:
                m.first_pass_time = round(self._clock(), 3)
