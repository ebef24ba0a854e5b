"""One member's run: its task, span, tool-state scope, limits, background work and status."""

import math
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVarTuple, Unpack

import anyio
from inspect_ai.agent import Agent, AgentState, current_agent_bridge_context
from inspect_ai.model import ChatMessage, ModelOutput
from inspect_ai.util import Limit, LimitExceededError, apply_limits, span, tool_state_scope
from inspect_ai.util._background import background_target
from inspect_ai.util._span import current_span_id

from ._bridged import MeteredLimits
from ._context import _member
from ._member import MemberSpec
from ._roster import MemberState
from ._sandbox import member_sandbox, prepare_member_sandbox
from ._stop import MemberStop, StopCause, is_cancellation, leaves

if TYPE_CHECKING:
    from ._run import SwarmRun

PosArgsT = TypeVarTuple("PosArgsT")

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
        # a bridged member's own limits, which the swarm meters instead of Inspect
        self.metered: MeteredLimits | None = None
        self.bridge_used = False
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
        if self.spec.bridged:
            self._cancel()

    def refusal(self, stopping: bool) -> MemberStop | None:
        """The stop to raise at a model call the member may no longer make, if any.

        A call through the agent bridge is cancelled instead: a limit error raised inside the
        bridge would end the sample.
        """
        cause = self.stop_cause or ("stopped" if stopping or self.agent_returned else None)
        if cause is None:
            return None
        if self.spec.bridged or current_agent_bridge_context() is not None:
            self.stop(cause)
            self._cancel()
            return None
        return MemberStop(self.name, cause, self.stop_token)

    def before_call(self, run: "SwarmRun", messages: int) -> MemberStop | None:
        """Check a model call with `messages` input messages that the member (its subagents and
        background work included) is about to make; return the stop to raise, if any."""
        if current_agent_bridge_context() is not None:
            self._bridge_call()
        if self.metered is not None:
            limit = self.metered.reached(
                run.meter.member_usage(self.name),
                run.meter.member_used(self.name, "cost"),
                run.observer.steps.get(self.name, 0),
                messages,
            )
            if limit is not None:
                self.stop(f"member_limit:{limit}")
        return self.refusal(run.stopping)

    def charged(self, run: "SwarmRun") -> None:
        """A call of the member was charged: a bridged member past its own limit ends at once."""
        if self.metered is None:
            return
        limit = self.metered.exceeded(
            run.meter.member_usage(self.name), run.meter.member_used(self.name, "cost")
        )
        if limit is not None:
            self.stop(f"member_limit:{limit}")

    def _bridge_call(self) -> None:
        self.bridge_used = True
        if self.background.started and self.status != "errored":
            self._fail(
                RuntimeError(
                    f"member {self.name!r} used the agent bridge after starting background work, "
                    "and a member cannot combine the two. Run the bridged agent as a member of "
                    "its own (member(..., bridged=True)), or start no background work."
                )
            )

    def _fail(self, error: Exception) -> None:
        # ends the member errored without raising in the task that found the fault
        self.status, self.error = "errored", error
        self._cancel()

    def _cancel(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


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

    def start_soon(
        self, func: Callable[[Unpack[PosArgsT]], Coroutine[Any, Any, Any]], *args: *PosArgsT
    ) -> None:
        if self.member.spec.bridged or self.member.bridge_used:
            raise RuntimeError(
                f"background(): member {self.member.name} is bridged (declared, or it used the "
                "agent bridge), and bridged members cannot have background work. Run the work "
                "in the agent, or keep the bridged agent out of this member."
            )
        if self._tg is None:
            # the work is counted, and never runs: the swarm cancels it as it starts
            self.started += 1
            self.cancelled += 1
            error = RuntimeError(
                f"background(): member {self.member.name}'s factory started background work "
                "while building its agent. Start background work from the running agent."
            )
            self.member.error = error
            raise error
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
        if m.error is not None:
            raise m.error  # a fault the swarm found outside the member's task
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
        await prepare_member_sandbox(m.spec, run.host_tools)
        with m.background.owning(None):
            agent = m.spec.build()
        if m.error is not None:
            raise m.error  # the factory started background work, and caught the refusal
        async with anyio.create_task_group() as tg:
            with m.background.owning(tg):
                state, limit = await _run_agent(m, agent, AgentState(messages=messages))
                m.agent_returned = True
                m.output = state.output
                if limit is not None:
                    m.status = f"member_limit:{limit}"
                    # a time limit cancels the agent, so its calls in flight are unknown
                    m.cancelled = limit == "time"
                # an output with no choices (a CLI that made no call) is still a normal return
                elif state.output.choices and state.output.stop_reason in UNSUBMITTED_STOP_REASONS:
                    m.status = "unsubmitted"
                else:
                    m.status = "submitted"
                    m.submit_time = run.clock()
                run.member_agent_returned(m)
                await m.background.drain(run.grace())


async def _run_agent(
    m: MemberRun, agent: Agent, state: AgentState
) -> tuple[AgentState, str | None]:
    """Run the member's agent under its own limits; return its state and the limit it reached."""
    limits = m.spec.fresh_limits()
    if m.spec.bridged:
        # never Inspect's limits: a limit error raised inside the bridge would end the sample
        m.metered = MeteredLimits.of(limits)
        deadline = m.metered.time if m.metered.time is not None else math.inf
        with anyio.move_on_after(deadline):
            return await agent(state), None
        return state, "time"
    m.limits = tuple(limits)
    with apply_limits(limits, catch_errors=True) as scope:
        state = await agent(state)
    return state, None if scope.limit_error is None else scope.limit_error.type


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
