"""Work a channel holds for the swarm: what is still open or unread, and who it was given to.

A channel whose records hand out work, such as `tasks()` or `messages()`, opens a state that
implements `WorkState` beside `ChannelState`. The bus asks every such state, so a controller
(a coordinator that starts members once they have work, a quiescence stop) reads the run's
channels through one typed query and never needs to know which channels a swarm has. A channel whose state does
not implement it holds no work: the board and the filesystem are always settled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

__all__ = ["Assignment", "Outstanding", "WorkState"]


@dataclass(frozen=True)
class Outstanding:
    """What one channel still holds open or unread, by id, at the moment it is asked."""

    open: tuple[str, ...] = ()
    """Work no member is doing and that is not done, such as tasks, claimable or not (`t-3`).
    A claim whose lease has expired, or whose claimant has ended, leaves its task open."""

    claimed: tuple[str, ...] = ()
    """Work a running member holds a live claim on and has not finished."""

    unread: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """For each member that has not ended, the messages to it that it has not read (`m-4`).
    A member with none is left out."""

    @property
    def settled(self) -> bool:
        """Nothing is open, claimed or unread."""
        return not (self.open or self.claimed or self.unread)


@dataclass(frozen=True)
class Assignment:
    """One piece of work a channel has put in a member's hands, and not yet seen finished."""

    channel: str
    """The channel's name (`Record.channel`)."""

    id: str
    """The task's or message's id (`t-3`, `m-7`)."""

    kind: Literal["task", "message"]
    """A task assigned to or claimed by the member, or a message to it."""

    by: str
    """The member that created the task or sent the message."""

    state: Literal["open", "claimed", "unread"]
    """`open` or `claimed` for a task (as `Outstanding` counts it), `unread` for a message."""


@runtime_checkable
class WorkState(Protocol):
    """The state of a channel that hands out work, such as tasks to do and messages to read:
    a `ChannelState` that implements these two methods as well.

    The bus asks it on behalf of controllers: `SwarmControl.outstanding()` and `assigned()`,
    `AllWaiting.outstanding`, the `quiescent()` stop and `coordinator()`. It calls these
    methods with no `await` around them; they change nothing.
    """

    def outstanding(self) -> Outstanding:
        """What the channel holds open or unread now.

        Returns:
            The ids, an `Outstanding` that is `settled` when there are none.
        """
        ...

    def assigned(self, member: str) -> list[Assignment]:
        """The work the channel has given `member` that it has not finished, oldest first:
        tasks assigned to it or claimed by it that are not done, messages to it it has not
        read.

        Args:
            member: The member's name.

        Returns:
            The assignments, empty when the member has none.
        """
        ...
