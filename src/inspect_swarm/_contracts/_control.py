from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol

from inspect_ai.model import ChatMessage

from ._roster import MemberState


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


@dataclass(frozen=True)
class MemberEnded:
    """A member ended."""

    member: str
    """The member's name."""

    status: str
    """How it ended, as `MemberHandle.status`."""

    submitted: bool
    """Whether it ended with a submission."""


SwarmEvent = MemberEnded
"""An event a controller receives from `SwarmControl.events()`. Later versions add kinds, so
test an event's type before reading its fields."""


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
        self, member: str | MemberHandle, input: str | list[ChatMessage] | None = None
    ) -> None:
        """Start a member without waiting for it.

        The member gets a task, a span and a tool-state scope of its own, and runs under its own
        limits. It receives `input` (the swarm's input when that is `None`) and then its
        preamble: its name and role, the roster's size, how the budget is split, and the
        instructions of each channel.

        Args:
            member: The member, or its name.
            input: The member's input. `None` gives it the swarm's input.

        Raises:
            KeyError: No member has this name.
            RuntimeError: The member has started before (a member runs once), or the swarm has
                begun to stop.
        """
        ...

    def events(self) -> AsyncGenerator[SwarmEvent, None]:
        """The swarm's events, in order, from the swarm's start on.

        Every event comes once. Iteration ends as soon as no member is running and no event is
        pending; for a member started after that, call `events()` again. Keep to one iterator
        at a time: from its first step until it is exhausted or closed (by `aclose()`, or on
        leaving a `contextlib.aclosing()` block), an iterator has the events to itself.

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
        submission.

        Args:
            member: The member, or its name.
            reason: Why the controller chose it, for the record.

        Raises:
            KeyError: No member has this name.
            RuntimeError: The controller has chosen an answer already.
            ValueError: The member has not ended with a submission.
        """
        ...
