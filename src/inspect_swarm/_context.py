"""Where code inside a swarm finds the run and the member it belongs to.

The runtime sets these ContextVars; everything else (the run-time tools, the bus, the hooks,
the scripted model) only reads them. Child tasks copy them, so a member's
subagents, background work and tool calls all see their member.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Literal, Protocol

from inspect_ai.agent import AgentState
from inspect_ai.model import ChatMessage, ChatMessageUser, ModelUsage
from inspect_ai.tool import Tool

from ._contracts._budget import SwarmBudget
from ._contracts._roster import Delivery, MemberInfo, MemberState
from ._contracts._status import MemberStatus

Continue = bool | str | AgentState
"""What an agent's `on_continue` hook decides."""


class MemberBus(Protocol):
    """The run's bus as a member's own tools reach it (`swarm_tools()`, `swarm_on_continue()`)."""

    def channel_tools(self, member: str) -> list[Tool]:
        """The tools the calling loop of `member` gets from the swarm's channels."""
        ...

    def notice(self, *, deliver: bool = True) -> ChatMessageUser | None:
        """The notice for the calling loop at its turn boundary, if it gets one."""
        ...


class SwarmHost(Protocol):
    """What the runtime of one swarm run offers the code that runs inside it.

    The run implements it; the run-time tools, the bus, the hooks and the scripted model
    depend on this protocol only, never on the run itself.
    """

    @property
    def roster(self) -> Sequence[MemberInfo]: ...

    @property
    def stopping(self) -> bool:
        """The swarm has begun to stop (set synchronously before any await)."""
        ...

    async def stop_begun(self, member: str) -> None:
        """Return once the swarm has begun to stop; or once nothing else can happen: every
        other member has ended, waits here too or waits for its next turn, and the controller
        waits for events with none left to read. Then every call waiting here returns."""
        ...

    async def next_change(self) -> None:
        """Return at the run's next change that a held call may wait for: a member's agent
        returned or the member ended, the stop began, the controller waits for events, a
        call began waiting in `stop_begun()`, or someone called `note_change()`."""
        ...

    def note_change(self) -> None:
        """Wake the calls waiting in `next_change()` and `stop_begun()` to look again (the
        scripted model calls it when a call begins)."""
        ...

    @property
    def bus(self) -> MemberBus | None: ...

    def clock(self) -> float:
        """Seconds since the swarm started."""
        ...

    def member_state(self, name: str) -> MemberState: ...

    def member_status(self, name: str) -> MemberStatus | None: ...

    def agent_returned(self, name: str) -> bool:
        """The member's own agent has finished (it may still be draining background work)."""
        ...

    def delivery(self, name: str) -> Delivery:
        """The member's effective delivery mode."""
        ...

    def background_running(self, name: str) -> int:
        """Background tasks of the member still running."""
        ...

    def member_span_id(self, name: str) -> str | None:
        """The id of the member's own agent span (its own loop), once it has started."""
        ...

    def budget(self, member: str | None) -> SwarmBudget:
        """The budget as `member` sees it (None: outside every member)."""
        ...

    def before_generate(self, member: str | None, messages: int) -> None:
        """A call with `messages` input messages is about to be dispatched: refuse it (by
        raising) if the member is stopped."""
        ...

    def charge(self, model: str, usage: ModelUsage, *, cached: bool) -> None:
        """A call of the calling member (or of the phase outside every member) completed with
        `usage`: meter it, and end the member (or the swarm) at a share or cap it reached."""
        ...

    async def between_quanta(
        self, state: AgentState, decision: Continue, *, conversational: bool
    ) -> Continue:
        """The calling loop reached a boundary with this `on_continue` decision: under an
        activation policy, end the member's activation there and wait for its next (what
        comes back is the decision to go on with); otherwise the decision as it was."""
        ...

    def record_exposure(self, messages: Sequence[ChatMessage]) -> list[str]:
        """Check what the calling member read against messages that reached its model."""
        ...


_swarm: ContextVar[SwarmHost | None] = ContextVar("inspect_swarm_run", default=None)
_member: ContextVar[str | None] = ContextVar("inspect_swarm_member", default=None)
# who, outside every member, a call inside the swarm belongs to: the controller or the final step
_phase: ContextVar[Literal["runtime", "final"] | None] = ContextVar(
    "inspect_swarm_phase", default=None
)


def current_swarm() -> SwarmHost | None:
    """The swarm run the caller is in (inside a member or in the swarm's own code)."""
    return _swarm.get()


def current_member() -> str | None:
    """The name of the member the caller runs in, or None outside every member."""
    return _member.get()


def current_phase() -> Literal["runtime", "final"] | None:
    """Outside every member: whether the caller is the controller or the final step."""
    return _phase.get()
