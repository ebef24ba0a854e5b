"""One member's run: its task, span, tool-state scope, limits, background work and status."""

from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio
from inspect_ai.agent import AgentState
from inspect_ai.model import ChatMessage, ModelOutput
from inspect_ai.util import Limit, LimitExceededError, apply_limits, span, tool_state_scope
from inspect_ai.util._background import background_target
from inspect_ai.util._span import current_span_id

from ._context import _member
from ._member import MemberSpec
from ._roster import MemberState
from ._sandbox import member_sandbox
from ._stop import MemberStop, StopCause, is_cancellation, leaves

if TYPE_CHECKING:
    from ._run import SwarmRun

UNSUBMITTED_STOP_REASONS = ("content_filter", "model_length")


class MemberRun:
    """A member in one run of the swarm; what a controller sees of it is its `MemberHandle` part."""

    def __init__(self, spec: MemberSpec) -> None:
        self.spec = spec
        self.state: MemberState = "pending"
        self.status: str | None = None
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.submit_time: float | None = None
        self.output: ModelOutput | None = None
        self.span_id: str | None = None
        self.agent_returned = False
        self.stop_cause: StopCause | None = None
        self.stop_token = object()
        self.cancelled = False
        self.scope: anyio.CancelScope | None = None
        self.background = MemberBackground(self)
        self.error: BaseException | None = None
        self.limits: tuple[Limit, ...] = ()
        self.gate_checks = 0
        self.gate_passes = 0
        self.first_pass_time: float | None = None

    # the MemberHandle protocol
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> str | None:
        return self.spec.record.role

    @property
    def submitted(self) -> bool:
        return self.status == "submitted"

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "state": self.state,
            "status": self.status,
            "submitted": self.submitted,
            "time": None if self.end_time is None else round(self.end_time, 3),
            "sandbox": self.spec.sandbox,
            "gate_checks": self.gate_checks,
            "gate_passes": self.gate_passes,
            "first_pass_time": self.first_pass_time,
        }

    def stop(self, cause: StopCause) -> None:
        """Ask the member to end: at its next model call, or at once for a bridged member."""
        if self.state != "running" or self.stop_cause is not None:
            return
        self.stop_cause = cause
        if self.spec.bridged and self.scope is not None:
            # a limit error raised inside the bridge would end the sample: cancel instead
            self.scope.cancel()

    def refusal(self, stopping: bool) -> MemberStop | None:
        """The stop to raise at a model call the member may no longer make, if any."""
        cause = self.stop_cause or ("stopped" if stopping or self.agent_returned else None)
        if cause is None:
            return None
        if self.spec.bridged:
            self.stop(cause)
            return None
        return MemberStop(self.name, cause, self.stop_token)


class MemberBackground:
    """The member's `background()` target: work its agent starts belongs to the member."""

    def __init__(self, member: MemberRun) -> None:
        self.member = member
        self.started = 0
        self.cancelled = 0
        self.running = 0
        self._tg: anyio.abc.TaskGroup | None = None
        self._idle = anyio.Event()
        self._idle.set()

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        if self.member.spec.bridged:
            raise RuntimeError(
                f"background(): member {self.member.name} is bridged, and bridged members cannot "
                "have background work. Run it in the agent, or make the member native."
            )
        if self._tg is None:
            raise RuntimeError(
                f"background(): member {self.member.name}'s factory started background work "
                "while building its agent. Start background work from the running agent."
            )
        self.started += 1
        self.running += 1
        self._idle = anyio.Event()
        self._tg.start_soon(self._run, func, args)

    async def _run(self, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        finished = False
        try:
            await func(*args)
            finished = True
        except LimitExceededError as ex:
            # a custom limit, a member limit or the swarm's stop ends only this task
            if not self._ends_task(ex):
                raise
            finished = True
        finally:
            if not finished:
                self.cancelled += 1
            self.running -= 1
            if self.running == 0:
                self._idle.set()

    def _ends_task(self, ex: LimitExceededError) -> bool:
        return (
            ex.source is None
            or ex.source is self.member.stop_token
            or ex.source in self.member.limits
        )

    @contextmanager
    def owning(self, tg: anyio.abc.TaskGroup | None) -> Iterator[None]:
        """Make this the target of `background()`; with no task group, `background()` raises."""
        self._tg = tg
        token = background_target.set(self)
        try:
            yield
        finally:
            background_target.reset(token)

    async def drain(self, grace: float) -> None:
        """Give running work up to `grace` seconds, then cancel what is left and await its cleanup."""
        if self._tg is None:
            return
        if grace > 0:
            with anyio.move_on_after(grace):
                await self._idle.wait()
        self._tg.cancel_scope.cancel()


async def run_member(run: "SwarmRun", m: MemberRun, messages: list[ChatMessage]) -> None:
    """Run one member to its end, recording how it ended.

    Member errors are the member's; a sample limit, an outside cancellation or an error that
    ends the sample is recorded and re-raised after the member's records are written.
    """
    token = _member.set(m.name)
    m.state = "running"
    m.start_time = run.clock()
    run.member_started(m)
    try:
        with (
            anyio.CancelScope() as scope,
            tool_state_scope(m.name),
            member_sandbox(m.spec),
        ):
            m.scope = scope
            try:
                await _execute(run, m, messages)
            except BaseException as ex:
                _classify(m, ex)
        if scope.cancelled_caught:
            m.cancelled = True
            if m.status is None:
                m.status = m.stop_cause or "cancelled"
    except BaseException as ex:
        # cancelled or ended from outside the swarm (a sample limit, an operator, an error)
        m.cancelled = m.cancelled or any(is_cancellation(e) for e in leaves(ex))
        if m.status is None:
            m.status = "cancelled"
        raise
    finally:
        m.state = "ended"
        m.end_time = run.clock()
        _member.reset(token)
        run.member_ended(m)


async def _execute(run: "SwarmRun", m: MemberRun, messages: list[ChatMessage]) -> None:
    async with span(m.name, type="agent"):
        m.span_id = current_span_id()
        with m.background.owning(None):
            agent = m.spec.build()
        m.limits = tuple(m.spec.fresh_limits())
        limits = list(m.limits)
        async with anyio.create_task_group() as tg:
            with m.background.owning(tg):
                state = AgentState(messages=messages)
                with apply_limits(limits, catch_errors=True) as limit_scope:
                    state = await agent(state)
                m.agent_returned = True
                m.output = state.output
                if limit_scope.limit_error is not None:
                    m.status = f"member_limit:{limit_scope.limit_error.type}"
                elif state.output.stop_reason in UNSUBMITTED_STOP_REASONS:
                    m.status = "unsubmitted"
                else:
                    m.status = "submitted"
                    m.submit_time = run.clock()
                run.member_agent_returned(m)
                await m.background.drain(run.grace())


def _classify(m: MemberRun, ex: BaseException) -> None:
    """Set the status an exception from the member's run gives it, or re-raise it."""
    errors = list(leaves(ex))
    if all(is_cancellation(e) for e in errors):
        raise ex
    for e in errors:
        if isinstance(e, MemberStop) and e.source is m.stop_token:
            m.status = m.status or e.cause
        elif isinstance(e, LimitExceededError) and e.source is None:
            m.status = m.status or "member_limit:custom"
        elif isinstance(e, LimitExceededError) and e.source in m.limits:
            m.status = m.status or f"member_limit:{e.type}"
        elif is_cancellation(e):
            continue
        else:
            # a sample limit, an operator's termination or any other error ends the sample
            if not isinstance(e, LimitExceededError):
                m.status = "errored"
                m.error = e
            raise ex
