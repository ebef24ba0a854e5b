from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from inspect_ai.model import ChatMessage

from ._roster import MemberState
from ._work import Assignment, Outstanding


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
        """
        ...

    def start(
        self, member: str | MemberHandle, input: str | list[ChatMessage] | None = None
    ) -> None:
        """Start a member, and return at once.

        The member runs in its own task, span and tool-state scope, with its limits. Its input is
        `input`, or the swarm's input when `input` is `None`, followed by the member's preamble:
        its name, role and roster size, how the budget is split, and each channel's instructions.

        Args:
            member: The member, or its name.
            input: The member's input. `None` gives it the swarm's input.
        """
        ...

    def events(self) -> AsyncGenerator[SwarmEvent, None]:
        """The swarm's events, in order from the swarm's start.

        Each event is yielded once. The iterator ends when no member is running and no event is
        waiting; a member started later is reported by a new `events()` call. Use one iterator at
        a time: an iterator holds the events from its first step until it ends or is closed
        (`aclose()`, or leaving a `contextlib.aclosing()` block).
        """
        ...

    def choose_answer(self, member: str | MemberHandle, reason: str | None = None) -> None:
        """Make this member's submission the swarm's answer, in place of the controller's `final` rule.

        The choice is the provisional answer from now on and the final answer when the swarm
        ends. The result record gives the mode `controller`, the member and `reason`. Choose
        once, from a member that has ended with a submission.

        Args:
            member: The member, or its name.
            reason: Why the controller chose it, for the record.
        """
        ...

    def outstanding(self) -> Mapping[str, Outstanding]:
        """What the swarm's channels hold open or unread now, by channel name.

        Only channels that hand out work answer, such as `tasks()` (open and claimed tasks)
        and `messages()` (each running member's unread messages); the swarm has nothing
        outstanding when every value is `settled`, or when there is none.
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
