from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, ParamSpec, Protocol, overload, runtime_checkable

from inspect_ai.tool import Tool
from pydantic import JsonValue

from ._factory import registered_factory
from ._record import Draft, Record
from ._roster import MemberInfo, MemberState

__all__ = [
    "Channel",
    "ChannelRun",
    "ChannelState",
    "NoticeLine",
    "StormControls",
    "WaitNews",
    "WaitSpec",
    "WaitingState",
    "swarm_channel",
]

P = ParamSpec("P")


@dataclass(frozen=True)
class StormControls:
    """Controls the bus applies to a channel's records before the channel's `admit()`."""

    rate: tuple[int, float] | None = None
    """The most records one member may deliver, all its loops together, in a sliding window
    of seconds, as `(count, seconds)`; `None` for no limit."""


class Caller(NamedTuple):
    """Who calls a channel's tool: the member, and the agent loop it acts in."""

    member: str
    loop: str | None
    own: bool
    tool_span: str | None


class Bus(Protocol):
    """The run's bus as a channel's state and tools use it.

    The runtime's bus implements it; a channel depends on this contract only, so a new
    channel plugs in without importing the runtime.
    """

    @property
    def stopping(self) -> bool:
        """The swarm has begun to stop: the bus refuses writes."""
        ...

    def clock(self) -> float:
        """Seconds since the swarm started."""
        ...

    def caller(self) -> Caller:
        """The member and loop the calling tool acts for (a `ToolError` outside a member)."""
        ...

    def own_loop(self, member: str) -> str | None:
        """The agent span of the member's own loop."""
        ...

    def member_state(self, member: str) -> MemberState:
        """Whether the member is pending, running or has ended."""
        ...

    def send(self, channel: str, draft: Draft) -> Record:
        """Deliver a tool's draft as a record from the calling member, through the storm
        controls and the channel's `validate()`, `admit()` and `apply()`."""
        ...

    def read(
        self, channel: str, caller: Caller, *, listing: bool, data: Mapping[str, JsonValue]
    ) -> None:
        """Record a view of the channel's state (its `read` evidence)."""
        ...


class Channel:
    """A sanctioned way for members to share information.

    Subclass it and override `instructions()`, and return an instance from a factory
    decorated with `@swarm_channel`. A `Channel` holds configuration only: one object serves
    every sample.

    A channel with tools and records also sets `name` and `prefix` and overrides `open()`,
    which gives each run of the swarm its own `ChannelState`. A channel that only adds
    instructions, such as `filesystem()`, leaves them unset.
    """

    name: str | None = None
    """The name of the channel's records (`Record.channel`), or `None` for a channel with no
    records. No two channels of a swarm may share it."""

    prefix: str | None = None
    """The prefix of the channel's record ids (`"w"` gives `w-1`), set exactly when `name`
    is. No two channels of a swarm may share it."""

    reach: Literal["loop", "member"] = "loop"
    """Which of a member's agent loops get the channel's tools from `swarm_tools()`.

    `"loop"` (the default): only the member's own loop, the first in which it resolves
    `swarm_tools()`. `"member"`: also the member's nested loops, such as a `deepagent()`
    member's subagents, which then act as the member.
    """

    storm: StormControls = StormControls()
    """The storm controls the bus applies to the channel's records. By default there are
    none."""

    max_wait: int | None = None
    """This channel's contribution to the longest `swarm_wait`, in seconds, or `None` (the
    default) for a channel whose records wake no waits.

    A channel that sets it opens a state that implements `WaitingState`. The bus's effective
    maximum is the largest `max_wait` of the run's open channels that set it.
    """

    bridged: bool = False
    """Whether bridged members can use the channel's tools, which they get as host tools
    through the agent bridge (`swarm_bridged_tools()`). `swarm()` refuses a bridged member
    beside a channel with records that leaves it `False` (the default)."""

    wait_path: str | None = None
    """What the `path` argument of `swarm_wait` watches in this channel, as the tool
    describes it to the model, or `None` (the default) for a channel whose waits take no
    path. `swarm_wait` has a `path` argument only in loops that reach a channel setting it."""

    def check(self, roster: Sequence[MemberInfo]) -> None:
        """Check the roster when `swarm()` is called.

        Raise `ValueError` for a roster the channel cannot serve.

        Args:
            roster: The swarm's members.
        """
        return None

    def open(self, run: ChannelRun) -> ChannelState | None:
        """Open the channel's state for one run of the swarm, before any member starts.

        Args:
            run: The run's bus and roster.

        Returns:
            The channel's state for the run, or `None` for a channel with no records.
        """
        return None

    def instructions(self, member: MemberInfo) -> str | None:
        """Text for the member's preamble.

        Args:
            member: The member the text is for.

        Returns:
            The text, or `None` to add nothing.
        """
        return None


@dataclass(frozen=True)
class ChannelRun:
    """What `Channel.open()` gets for one run of the swarm."""

    bus: Bus
    """The run's bus, which the channel's tools deliver records through."""

    roster: Sequence[MemberInfo]
    """The swarm's members."""


@dataclass(frozen=True)
class NoticeLine:
    """A line of a member's notice, which `swarm_on_continue()` adds at its turn boundary."""

    text: str
    """The line: a fixed template whose only variables are counts, swarm-assigned ids and
    roster names, never anything a member wrote or chose."""

    ids: Mapping[str, JsonValue]
    """The swarm ids the line names, such as
    `{"files": [{"file": "f-2", "version": 3, "record": "w-7"}]}`, given as `ids` in the
    notice's metadata and in its `notified` evidence."""


@dataclass(frozen=True)
class WaitSpec:
    """One call of `swarm_wait`, as the bus asks a `WaitingState` about it."""

    id: str
    """The wait's id (`"x-4"`), numbered per run."""

    member: str
    """The waiting member's name."""

    loop: str | None
    """The agent span of the loop that waits."""

    own: bool
    """Whether that loop is the member's own, not one of its subagents'."""

    path: str | None = None
    """The `path` argument as the model gave it, or `None` without one. Only a channel that
    sets `Channel.wait_path`, such as the shared memory's board, narrows its news by it;
    the other channels' news reaches the wait whatever the path."""


@dataclass(frozen=True)
class WaitNews:
    """What a channel has for a waiting loop to look at."""

    lines: list[str]
    """The channel's lines for the wait's result. Fixed templates with ids and member
    names, never content."""

    files: list[dict[str, JsonValue]]
    """What `lines` name, for the `waited` evidence."""


@runtime_checkable
class ChannelState(Protocol):
    """A channel's state in one run of the swarm, which only the bus changes.

    The bus calls `validate()`, `admit()` and `apply()` with no `await` between them, so
    `admit()` sees the state that `apply()` changes.
    """

    def tools(self) -> list[Tool]:
        """The channel's tools, which deliver records through the run's bus."""
        ...

    def validate(self, record: Record) -> None:
        """Check a record's payload and operation data, before the record gets an id.

        Raise `ToolError` for a record that cannot be valid in any state.

        Args:
            record: The record.
        """
        ...

    def admit(self, record: Record) -> None:
        """Check a record against the state as it is now, after the storm controls.

        Raise `Refused` naming the control that refuses it.

        Args:
            record: The record.
        """
        ...

    def apply(self, record: Record) -> tuple[list[str], Mapping[str, JsonValue] | None]:
        """Apply an admitted record to the state. It cannot fail.

        Args:
            record: The record.

        Returns:
            The members the record was delivered to (none for a write to shared state),
            and the channel's data for the record's `delivered` evidence.
        """
        ...

    def notice_lines(self, member: str) -> list[NoticeLine]:
        """The lines of the member's next notice, which they then cover.

        Called at the member's turn boundary, only when the notice will be added, so a line
        covers what it names: the next call leaves it out until it changes again.

        Args:
            member: The member the notice is for.
        """
        ...


@runtime_checkable
class WaitingState(ChannelState, Protocol):
    """The state of a channel whose records wake waits (one that sets `Channel.max_wait`).

    The bus calls these methods with no `await` around them. None of them marks anything:
    a loop acknowledges what a wait names by reading it with the channel's own tool.
    """

    def wait_check(self, spec: WaitSpec) -> None:
        """Check a wait's filter when the wait is called.

        Raise `ToolError` for a filter the channel cannot serve.

        Args:
            spec: The wait.
        """
        ...

    def wakes(self, spec: WaitSpec, record: Record) -> bool:
        """Whether a record the channel has just applied made something reportable to a wait.

        Args:
            spec: The wait.
            record: The applied record, which has `wake` set.
        """
        ...

    def news(self, spec: WaitSpec) -> WaitNews | None:
        """What is reportable to a wait now.

        Args:
            spec: The wait.
        """
        ...


@overload
def swarm_channel(func: Callable[P, Channel], /) -> Callable[P, Channel]: ...


@overload
def swarm_channel(
    *, name: str | None = None
) -> Callable[[Callable[P, Channel]], Callable[P, Channel]]: ...


def swarm_channel(
    func: Callable[P, Channel] | None = None, /, *, name: str | None = None
) -> Callable[P, Channel] | Callable[[Callable[P, Channel]], Callable[P, Channel]]:
    """Decorator for registering swarm channels.

    The factory's arguments are recorded with the channel, so they appear in the log and the
    channel can be rebuilt from it. A factory in a package is registered as
    `<package>/<name>`.

    Args:
        func: A function returning a `Channel`.
        name: The registered name, in place of the function's name.

    Returns:
        The registered factory.
    """
    return registered_factory("swarm_channel", func, name)
