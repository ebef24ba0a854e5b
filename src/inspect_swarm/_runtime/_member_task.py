"""A member's task: its span, tool-state scope, sandbox, limits and agent, run to its end."""

import math
from typing import Protocol

import anyio
from inspect_ai.agent import Agent, AgentState
from inspect_ai.model import ChatMessage
from inspect_ai.util import LimitExceededError, apply_limits, span, tool_state_scope
from inspect_ai.util._span import current_span_id

from .._context import _member
from .._contracts._status import LimitType, member_limit
from ._limits import MeteredLimits
from ._member_run import MemberRun
from ._sandbox import member_sandbox, prepare_member_sandbox
from ._stop import MemberStop, is_cancellation, leaves

UNSUBMITTED_STOP_REASONS = ("content_filter", "model_length")


class MemberHost(Protocol):
    """What a member's task needs of its run: the clock, the grace period, and the lifecycle
    calls the run answers (the events a controller sees, the bus's news, the records)."""

    @property
    def host_tools(self) -> anyio.Lock:
        """Held while a member injects sandbox tools into a local sandbox."""
        ...

    def clock(self) -> float: ...

    def grace(self) -> float: ...

    def member_started(self, m: MemberRun) -> None: ...

    async def before_agent(self, m: MemberRun, messages: list[ChatMessage]) -> None:
        """The member's agent is about to start on `messages`: under an activation policy,
        wait for the member's first activation."""
        ...

    def member_agent_returned(self, m: MemberRun) -> None: ...

    async def member_turn_ended(self, m: MemberRun) -> list[ChatMessage] | None:
        """The member's turn ended normally: the next turn's input, or `None` to end it."""
        ...

    def member_ending(self, m: MemberRun, outside: BaseException | None) -> None:
        """The member has ended (`outside`: what ended it from outside the swarm, if that did),
        and its span is still open: the last word of its timeline."""
        ...

    def member_ended(self, m: MemberRun) -> None: ...


async def run_member(run: MemberHost, m: MemberRun, messages: list[ChatMessage]) -> None:
    """Run one member to its end, recording how it ended.

    Member errors are the member's; a sample limit, an outside cancellation or an error that
    ends the sample is recorded and re-raised after the member's records are written.
    """
    token = _member.set(m.name)
    m.state = "running"
    m.start_time = run.clock()
    run.member_started(m)
    try:
        async with span(m.name, type="agent"):
            m.span_id = current_span_id()
            outside: BaseException | None = None
            try:
                await _run_scoped(run, m, messages)
            except BaseException as ex:
                # cancelled or ended from outside the swarm (a sample limit, an operator, an error)
                outside = ex
                m.cancelled = m.cancelled or any(is_cancellation(e) for e in leaves(ex))
                if m.status is None:
                    m.status = "cancelled"
                raise
            finally:
                m.end_time = run.clock()
                run.member_ending(m, outside)
    finally:
        m.state = "ended"
        _member.reset(token)
        run.member_ended(m)


async def _run_scoped(run: MemberHost, m: MemberRun, messages: list[ChatMessage]) -> None:
    """Run the member in its cancel scope, tool-state scope and sandbox; set its status."""
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


async def _execute(run: MemberHost, m: MemberRun, messages: list[ChatMessage]) -> None:
    await prepare_member_sandbox(m.spec, run.host_tools)
    with m.background.owning(None):
        agent = m.spec.build()
    if m.error is not None:
        raise m.error  # the factory started background work, and caught the refusal
    async with anyio.create_task_group() as tg:
        with m.background.owning(tg):
            await _run_agent(run, m, agent, messages)
            await m.background.drain(run.grace())


async def _run_agent(
    run: MemberHost, m: MemberRun, agent: Agent, messages: list[ChatMessage]
) -> None:
    """Run the member's agent, turn by turn, under its own limits, which cover every turn."""
    limits = m.spec.fresh_limits()
    # the current turn's state: an agent that a limit interrupts leaves its progress there
    turn = [AgentState(messages=messages)]

    async def turns() -> None:
        await run.before_agent(m, turn[0].messages)
        while True:
            _returned(run, m, await agent(turn[0]), None)
            following = await run.member_turn_ended(m)
            if following is None:
                return
            turn[0] = AgentState(messages=following)

    if m.spec.bridged:
        # never Inspect's limits: a limit error raised inside the bridge would end the sample
        m.metered = MeteredLimits.of(limits)
        deadline = m.metered.time if m.metered.time is not None else math.inf
        with anyio.move_on_after(deadline):
            await turns()
            return
        limit: LimitType | None = "time"
    else:
        m.limits = tuple(limits)
        with apply_limits(limits, catch_errors=True) as scope:
            await turns()
        m.limit_error = scope.limit_error
        limit = None if scope.limit_error is None else scope.limit_error.type
    # a limit reached between turns leaves the last turn's ending as it was
    if limit is not None and not m.agent_returned:
        _returned(run, m, turn[0], limit)


def _returned(run: MemberHost, m: MemberRun, state: AgentState, limit: LimitType | None) -> None:
    """Record how the member's agent returned (or the limit that ended it) and tell the run."""
    m.agent_returned = True
    # a turn a limit interrupted before any output leaves the member's last answer in place
    if limit is None or state.output.choices or m.output is None:
        m.output = state.output
        m.messages = state.messages
    if limit is not None:
        m.status = member_limit(limit)
        # a time limit cancels the agent, so its calls in flight are unknown
        m.cancelled = limit == "time"
    # an output with no choices (a CLI that made no call) is still a normal return
    elif state.output.choices and state.output.stop_reason in UNSUBMITTED_STOP_REASONS:
        m.status = "unsubmitted"
    else:
        m.status = "submitted"
        m.submit_time = run.clock()
        m.submissions += 1
    run.member_agent_returned(m)


def _classify(m: MemberRun, ex: BaseException) -> None:
    """Set the status an exception from the member's run gives it, or re-raise it."""
    errors = list(leaves(ex))
    if all(is_cancellation(e) for e in errors):
        raise ex
    for e in errors:
        if isinstance(e, MemberStop) and e.source is m.stop_token:
            m.status = m.status or e.cause
        elif isinstance(e, LimitExceededError) and e.source is None:
            m.status = m.status or member_limit("custom")
        elif isinstance(e, LimitExceededError) and e.source in m.limits:
            m.status = m.status or member_limit(e.type)
            m.limit_error = m.limit_error or e
        elif is_cancellation(e):
            continue
        else:
            # a sample limit, an operator's termination or any other error ends the sample
            if not isinstance(e, LimitExceededError):
                m.status = "errored"
                m.error = e
            raise ex
