from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, overload

from inspect_ai.model import ChatMessage
from inspect_ai.scorer import Scorer

from ._roster import MemberState


class MemberHandle(Protocol):
    """A member as a controller sees it: its name, role, state and status, never its text."""

    @property
    def name(self) -> str:
        """The member's name."""
        ...

    @property
    def role(self) -> str | None:
        """The member's role, if it has one."""
        ...

    @property
    def state(self) -> MemberState:
        """The member's lifecycle state."""
        ...

    @property
    def status(self) -> str | None:
        """How the member ended, once it has: `submitted`, `unsubmitted`, `stopped`, `share`,
        `member_limit:<type>`, `swarm_cap`, `cancelled` or `errored`."""
        ...

    @property
    def submitted(self) -> bool:
        """Whether the member ended with a submission (status `submitted`)."""
        ...


class SwarmEvent:
    """An event a controller receives from `SwarmControl.events()`.

    Each kind is a subclass. `events()` yields `MemberEnded` unless it is asked for other
    kinds, so test an event's type before reading its fields when you ask for more than one.
    """

    __slots__ = ()


@dataclass(frozen=True)
class MemberEnded(SwarmEvent):
    """A member ended."""

    member: str
    """The member's name."""

    status: str
    """How it ended, as `MemberHandle.status`."""

    submitted: bool
    """Whether it ended with a submission."""


@dataclass(frozen=True)
class TurnEnded(SwarmEvent):
    """A member started with `turns=True` finished a turn and waits for the controller's
    `next_turn()`. A turn that a limit, an error or the swarm's stop ends is a `MemberEnded`."""

    member: str
    """The member's name."""

    turn: int
    """The turn it finished, from 1."""

    status: str
    """How the turn ended: `submitted` or `unsubmitted`."""

    submitted: bool
    """Whether the turn ended with a submission."""


@dataclass(frozen=True)
class AllWaiting(SwarmEvent):
    """Every member is waiting in `swarm_wait`, has ended or has not started.

    While the controller holds this event, from when `events()` yields it until the controller
    asks for the next event, the waits stay blocked: the controller can stop the swarm before
    any member acts again. Then they end, as they do for a controller that does not ask for
    this kind, with the outcome `all_waiting`.
    """

    time: float
    """The swarm time since which every member has been waiting, as `SwarmControl.waiting_since`."""

    open_work: Mapping[str, Sequence[str]]
    """What the channels hold still to be done at that time, as `SwarmControl.open_work()`."""


@dataclass(frozen=True)
class ModelCalled(SwarmEvent):
    """A model call of a member (its subagents' and background work's included) completed."""

    member: str
    """The member's name."""

    time: float
    """The swarm time of the call's completion."""


@dataclass(frozen=True)
class RecordDelivered(SwarmEvent):
    """A channel delivered a record: a write to shared state, or a message to members."""

    channel: str
    """The channel's name (`Record.channel`)."""

    record: str
    """The record's id, such as `w-3`."""

    kind: str
    """What the record does, in the channel's terms (`Record.kind`)."""

    sender: str
    """The member that sent it."""

    recipients: tuple[str, ...]
    """The members it was delivered to; none for a write to shared state."""

    time: float
    """The swarm time of the delivery."""


EventKind = TypeVar("EventKind", bound=SwarmEvent)


class SwarmControl(Protocol):
    """What a controller's `run` works through: the swarm's members and their events, for one sample."""

    @property
    def members(self) -> Sequence[MemberHandle]:
        """The members, in roster order."""
        ...

    def member(self, name: str) -> MemberHandle:
        """The member with this name.

        Args:
            name: The member's name.
        """
        ...

    def start(
        self,
        member: str | MemberHandle,
        input: str | list[ChatMessage] | None = None,
        *,
        turns: bool = False,
    ) -> None:
        """Start a member, and return at once.

        The member runs in its own task, span and tool-state scope, with its limits. Its input is
        `input`, or the swarm's input when `input` is `None`, followed by the member's preamble:
        its name, role and roster size, how the budget is split, and each channel's instructions.

        Args:
            member: The member, or its name.
            input: The member's input. `None` gives it the swarm's input.
            turns: Run the member in turns: when its agent returns normally, the member does
                not end but waits, with a `TurnEnded` event, until `next_turn()` runs its
                agent again or the swarm stops. Its limits cover all its turns, and the waits
                between them.
        """
        ...

    def next_turn(
        self,
        member: str | MemberHandle,
        input: str | list[ChatMessage] | None = None,
        *,
        show: Sequence[str | MemberHandle] = (),
        last: bool = False,
    ) -> None:
        """Run the next turn of a member waiting after a `TurnEnded` event, and return at once.

        The member's agent runs again on a new conversation: `input` (or the swarm's input),
        the preamble, and a message with the latest answers of the members in `show`. The
        runtime writes that message, so the controller routes what members wrote without
        seeing it.

        Args:
            member: The member, or its name.
            input: The turn's input. `None` gives it the swarm's input.
            show: The members whose latest answers the member sees, the member itself
                included if listed.
            last: End the member when this turn ends, rather than wait for another.
        """
        ...

    @overload
    def events(self) -> AsyncGenerator[MemberEnded, None]: ...

    @overload
    def events(self, *kinds: type[EventKind]) -> AsyncGenerator[EventKind, None]: ...

    def events(self, *kinds: type[SwarmEvent]) -> AsyncGenerator[SwarmEvent, None]:
        """The swarm's events, in order from the swarm's start.

        Each event is yielded once. The iterator ends when no member is running and no event is
        waiting; a member started later is reported by a new `events()` call. Use one iterator at
        a time: an iterator holds the events from its first step until it ends or is closed
        (`aclose()`, or leaving a `contextlib.aclosing()` block).

        Args:
            *kinds: The kinds of event to yield, `MemberEnded` when none is given. The iterator
                passes over events of other kinds, which no later iterator yields.
        """
        ...

    def choose_answer(self, member: str | MemberHandle, reason: str | None = None) -> None:
        """Make this member's submission the swarm's answer, in place of the controller's `final` rule.

        The choice is the provisional answer from now on and the final answer when the swarm
        ends. The result record gives the mode `controller`, the member and `reason`. Choose
        once, from a member that has ended with a submission, or that waits for its next turn
        after a turn that ended with one; the answer is then its submission when the swarm
        ends, a later turn's if it takes one.

        Args:
            member: The member, or its name.
            reason: Why the controller chose it, for the record.
        """
        ...

    async def verify(self, member: str | MemberHandle, check: Scorer | None = None) -> bool:
        """Check a member's latest submission, and say whether it passed.

        The check runs outside the member, with the member's sandbox as the default, on the
        member's conversation and output, and is logged as an intermediate score. It counts
        in the member's `gate_checks`, `gate_passes` and `first_pass_time`. A pass is a
        score of 1.0 under Inspect's `value_to_float()`.

        Args:
            member: A member whose latest turn ended with a submission.
            check: The scorer to check with. `None` uses the task's first scorer.
        """
        ...

    def agreement(self, members: Sequence[str | MemberHandle] | None = None) -> list[list[str]]:
        """The members whose latest turn ended with a submission, grouped by equal answers.

        Answers are compared without case and with runs of whitespace as one space. Each
        group lists member names by submission time, and the groups are in the order of
        their first submission. The controller learns who agrees, never what they wrote.

        Args:
            members: The members to group. `None` means every member.
        """
        ...

    def open_work(self, member: str | MemberHandle | None = None) -> Mapping[str, Sequence[str]]:
        """What the channels hold that is still to be done, by channel: the ids of tasks open or
        claimed, of messages unread and so on, as each channel's `WorkState.open_work()` says.
        Channels that hold nothing still to be done are left out, so `{}` means none.

        Args:
            member: Only what waits on this member (work assigned to it, messages to it
                unread). `None` means everything still to be done.
        """
        ...

    @property
    def waiting_since(self) -> float | None:
        """The swarm time since which every member has been waiting in `swarm_wait`, has
        ended or has not started, or `None` when a member is at work."""
        ...
