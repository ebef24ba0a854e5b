from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar, overload

from inspect_ai.model import ChatMessage
from inspect_ai.scorer import Scorer

from ._roster import MemberState
from ._work import Assignment, Outstanding


class MemberHandle(Protocol):
    """What a controller knows of a member: name, role, lifecycle state and how it ended.

    A member's messages and output are not part of it.
    """

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
        """`None` until the member ends, then the way it ended: `submitted`, `unsubmitted`,
        `stopped`, `share`, `member_limit:<type>`, `swarm_cap`, `cancelled` or `errored`."""
        ...

    @property
    def submitted(self) -> bool:
        """Whether the member ended with a submission (status `submitted`)."""
        ...


Quantum = Literal["model_step", "completion"]
"""How far one activation of a scheduled member runs: one model step (a generation and the
tool calls it makes), or to the end of its agent."""

Transform = Callable[[list[ChatMessage]], list[ChatMessage]]
"""An edit of a waiting member's conversation: given a copy of its messages, the messages it
should go on with."""


@dataclass(frozen=True)
class Activation:
    """What one activation of a scheduled member did, as `ScheduledMember.activate()` returns it."""

    member: str
    """The member's name."""

    number: int
    """The member's activation, from 1."""

    quantum: Quantum
    """The quantum the activation was given."""

    status: str
    """`waiting` when the member parked for its next activation, else how it ended (as
    `MemberHandle.status`)."""

    steps: int
    """The model steps the member completed in the activation."""

    tool_calls: tuple[str, ...]
    """The names of the tools it called, in order."""

    conversation: tuple[ChatMessage, ...] = field(repr=False, compare=False)
    """The member's messages at the end of the activation, as the member holds them: read
    them through `messages`."""

    @property
    def messages(self) -> list[ChatMessage]:
        """A copy of the member's conversation at the end of the activation, made when asked
        for: changing it changes nothing of the member's (that is `ScheduledMember.edit()`)."""
        return [m.model_copy(deep=True) for m in self.conversation]


class ScheduledMember(MemberHandle, Protocol):
    """A member under an activation policy: it runs only when the policy activates it.

    Between activations the member waits inside its agent's one run, at the boundary its
    `swarm_on_continue()` hook marks; its attempts, tools and connections stay as they were.
    """

    @property
    def waiting(self) -> bool:
        """Whether the member waits for its next activation."""
        ...

    @property
    def activations(self) -> int:
        """How many activations the member has begun."""
        ...

    async def activate(self, quantum: Quantum = "model_step") -> Activation:
        """Run the member until its next boundary, and return what it did.

        The pending interventions are applied first, in order. A `model_step` ends after one
        generation and its tool calls, or after a reply without tool calls of a
        conversational member; a `completion` runs the agent to its end (a conversational
        member's reply ends it too). An agent without `swarm_on_continue()` has no boundary,
        so its first activation runs it to its end, whatever the quantum.

        Args:
            quantum: `model_step` or `completion`.

        Raises:
            ValueError: `quantum` is not one of the two.
            RuntimeError: The member is not waiting: it runs, or has ended, or the swarm is
                stopping.
        """
        ...

    def snapshot(self) -> list[ChatMessage]:
        """A copy of the member's conversation as its last activation left it (its input
        before the first)."""
        ...

    def append(self, messages: Sequence[ChatMessage], *, origin: str) -> None:
        """Add messages to the end of the waiting member's conversation, at its next activation.

        Recorded as `intervened` evidence with `origin` and the ids and hashes of the
        messages added.

        Args:
            messages: The messages to add.
            origin: Who intervenes and why, for the record (`"attack"`, `"scenario"`).

        Raises:
            RuntimeError: The member is not waiting for an activation.
        """
        ...

    def edit(self, transform: Transform, *, origin: str) -> None:
        """Rewrite the waiting member's conversation at its next activation.

        `transform` gets a copy of the messages and returns those to go on with. Recorded as
        `intervened` evidence with `origin` and the ids and hashes of the messages added,
        removed and replaced (a message keeps its id when its content is replaced).

        Args:
            transform: The edit.
            origin: Who intervenes and why, for the record (`"defense"`).

        Raises:
            RuntimeError: The member is not waiting for an activation.
        """
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
    """Every member is waiting in `swarm_wait` or for its next turn, has ended or has not
    started.

    While the controller holds this event, from when `events()` yields it until the controller
    asks for the next event, the waits stay blocked: the controller can stop the swarm before
    any member acts again. Then they end, as they do for a controller that does not ask for
    this kind, with the outcome `all_waiting`.
    """

    time: float
    """The swarm time since which every member has been waiting, as `SwarmControl.waiting_since`."""

    outstanding: Mapping[str, Outstanding]
    """What the channels held open or unread at that time, as `SwarmControl.outstanding()`."""


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

        Returns:
            The member's handle.

        Raises:
            KeyError: No member has this name.
        """
        ...

    def start(
        self,
        member: str | MemberHandle,
        input: str | list[ChatMessage] | None = None,
        *,
        turns: bool = False,
    ) -> None:
        """Start a member without waiting for it.

        The member gets a task, a span and a tool-state scope of its own, and runs under its own
        limits. It receives `input` (the swarm's input when that is `None`) and then its
        preamble: its name and role, the roster's size, how the budget is split, and the
        instructions of each channel.

        Args:
            member: The member, or its name.
            input: The member's input. `None` gives it the swarm's input.
            turns: Run the member in turns: when its agent returns normally, the member does
                not end but waits, with a `TurnEnded` event, until `next_turn()` runs its
                agent again or the swarm stops. Its limits cover all its turns, and the waits
                between them.

        Raises:
            KeyError: No member has this name.
            RuntimeError: The member has started before (a member runs once), the swarm has
                begun to stop, or the controller is an activation policy (whose members all
                start with the swarm).
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
        """The swarm's events, in order, from the swarm's start on.

        Every event comes once. Iteration ends as soon as no member is running and no event is
        pending; for a member started after that, call `events()` again. Keep to one iterator
        at a time: from its first step until it is exhausted or closed (by `aclose()`, or on
        leaving a `contextlib.aclosing()` block), an iterator has the events to itself.

        Args:
            *kinds: The kinds of event to yield, `MemberEnded` when none is given. The iterator
                passes over events of other kinds, which no later iterator yields.

        Yields:
            Each event once, such as `MemberEnded`.

        Raises:
            RuntimeError: Another `events()` iterator is still open.
        """
        ...

    def choose_answer(self, member: str | MemberHandle, reason: str | None = None) -> None:
        """Make this member's submission the swarm's answer, in place of the controller's `final` rule.

        From this call on, the chosen submission is the provisional answer, and it stays the
        answer when the swarm ends; the result record shows mode `controller`, with the member
        and `reason`. A controller chooses at most once, and only a member that has ended with a
        submission, or one that waits for its next turn after a turn that ended with one (the
        answer is then the submission of its last turn when the swarm ends).

        Args:
            member: The member, or its name.
            reason: Why the controller chose it, for the record.

        Raises:
            KeyError: No member has this name.
            RuntimeError: The controller has chosen an answer already.
            ValueError: The member has not ended with a submission.
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

    def outstanding(self) -> Mapping[str, Outstanding]:
        """What the swarm's channels hold open or unread now, by channel name.

        Only channels that hand out work answer (their state is a `WorkState`), such as
        `tasks()` (open and claimed tasks) and `messages()` (each running member's unread
        messages). A channel holding nothing is left out, so `{}` means the swarm's work is
        settled.
        """
        ...

    def assigned(self, member: str | MemberHandle) -> list[Assignment]:
        """The work the swarm's channels have given a member that it has not finished: tasks
        assigned to it or claimed by it that are not done, and messages to it that it has not
        read. A member that has not started can have some.

        Args:
            member: The member, or its name.
        """
        ...

    @property
    def waiting_since(self) -> float | None:
        """The swarm time since which every member has been waiting in `swarm_wait` or for
        its next turn, has ended or has not started, or `None` when a member is at work."""
        ...

    def scheduled(self, member: str | MemberHandle) -> ScheduledMember:
        """The member as an activation policy drives it.

        Args:
            member: The member, or its name.

        Raises:
            KeyError: No member has this name.
            RuntimeError: The controller is not a policy (`Controller(policy=True)`).
        """
        ...

    def set_output(self, member: str | MemberHandle, reason: str | None = None) -> None:
        """Make this member's latest output the swarm's output, submitted or not.

        Under a policy the latest output is the one of its last activation. A later call
        replaces an earlier one; the result record shows mode `controller`.

        Args:
            member: The member, or its name.
            reason: Why, for the record.

        Raises:
            KeyError: No member has this name.
            ValueError: The member has no output yet.
        """
        ...

    def read_cutoff(self) -> AbstractContextManager[None]:
        """A block in which the channels' reads show only the records delivered before it
        began, as a superstep's members see the state at the step's start. Writes go on
        as usual, and are seen once the block has ended."""
        ...
