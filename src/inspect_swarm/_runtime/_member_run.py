"""A member in one run of the swarm: the one object that holds every fact of it.

Its lifecycle, status, stop and background work; what it used (which the meter writes), what it
did (which the observer writes) and how it communicated (which the bus writes). The result, the
ledger and the metrics are projections of it. A per-member fact a later part adds (a score, a
vote) is a field here, written by its part and read by the records.
"""

from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVarTuple, Unpack

import anyio
from inspect_ai.agent import current_agent_bridge_context
from inspect_ai.model import ChatMessage, ModelOutput
from inspect_ai.util import Limit, LimitExceededError
from inspect_ai.util._background import background_target
from pydantic import JsonValue

from .._contracts._member import MemberSpec
from .._contracts._roster import MemberState
from .._contracts._schema import Calls, Meter
from .._contracts._status import MemberStatus, StopCause, WaitOutcome
from ._limits import MeteredLimits
from ._stop import MemberStop

PosArgsT = TypeVarTuple("PosArgsT")


@dataclass
class ChannelComm:
    """A member's use of one channel."""

    records: int = 0
    record_bytes: int = 0
    rejections: Counter[str] = field(default_factory=Counter)
    reads: int = 0
    listings: int = 0
    notices: int = 0

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "records": self.records,
            "record_bytes": self.record_bytes,
            "rejections": dict(self.rejections),
            "reads": self.reads,
            "listings": self.listings,
            "notices": self.notices,
        }


@dataclass
class MemberComm:
    """How a member communicated through the bus, which the bus keeps."""

    channels: dict[str, ChannelComm] = field(default_factory=dict)
    waits: int = 0
    outcomes: Counter[WaitOutcome] = field(default_factory=Counter)
    wait_time: float = 0.0
    idle_time: float = 0.0
    # own-loop and any-loop completed model calls, counted only as far as the wiring checks need
    own_calls: int = 0
    calls: int = 0
    # ended members this member's loops have been told of, by loop
    ended_told: dict[str | None, int] = field(default_factory=dict)


class MemberRun:
    """A member in one run of the swarm; what a controller sees of it is its `MemberHandle` part."""

    def __init__(self, spec: MemberSpec) -> None:
        self.spec = spec
        self.state: MemberState = "pending"
        self.status: MemberStatus | None = None
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.submit_time: float | None = None
        self.output: ModelOutput | None = None
        self.messages: list[ChatMessage] = []
        self.span_id: str | None = None
        self.agent_returned = False
        self.stop_cause: StopCause | None = None
        # the swarm cancelled it when the grace period after its stop ran out (the stopper's)
        self.grace_expired = False
        # its own limit's error, when one ended it
        self.limit_error: LimitExceededError | None = None
        self.stop_token = object()
        self.cancelled = False
        self.scope: anyio.CancelScope | None = None
        self.background = MemberBackground(self)
        self.error: BaseException | None = None
        self.limits: tuple[Limit, ...] = ()
        # a bridged member's own limits, which the swarm meters instead of Inspect
        self.metered: MeteredLimits | None = None
        self.bridge_used = False
        # what it used: its calls' usage and cost, and its model events (the meter's)
        self.meter = Meter()
        self.calls = Calls()
        # what it did: completed model calls, identical tool calls in a row, in-loop checks
        # (the observer's)
        self.steps = 0
        self.longest_tool_run = 0
        self.last_call: tuple[str, str] | None = None
        self.tool_run = 0
        self.gate_checks = 0
        self.gate_passes = 0
        self.submissions = 0
        """Each submission its loop checked and went on from, and each turn it ended with
        one (a controller's checks of them count none)."""
        self.first_pass_time: float | None = None
        # how it communicated (the bus's)
        self.comm = MemberComm()
        # its turns, for a member started with turns=True (the run's)
        self.turns = MemberTurns()

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

    def bridge_call(self) -> None:
        """The member calls a model through the agent bridge: refused after background work."""
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


@dataclass
class MemberTurns:
    """A member's turns: whether it takes them, how many it finished, and the next one's input
    while it waits for the controller."""

    enabled: bool = False
    finished: int = 0
    last: bool = False
    waiting: anyio.Event | None = None
    next_input: list[ChatMessage] | None = None

    @property
    def more(self) -> bool:
        """Whether the member waits for another turn when this one ends."""
        return self.enabled and not self.last

    def hold(self) -> anyio.Event:
        """Wait for the controller: the event is set when it runs the next turn, whose input is
        then `next_input`, or ends the member (`next_input` is `None`)."""
        self.waiting = anyio.Event()
        return self.waiting

    def release(self, messages: list[ChatMessage] | None, *, last: bool = False) -> None:
        """Run the next turn on `messages`, or end the member with `None`."""
        if self.waiting is not None:
            self.next_input, self.last = messages, last
            self.waiting.set()
            self.waiting = None


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
