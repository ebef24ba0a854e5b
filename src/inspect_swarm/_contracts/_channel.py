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
    "Bus",
    "Caller",
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
    """A cap on one member's records, as `(count, seconds)`: at most `count` delivered in any
    sliding window of `seconds`, over all of the member's loops; `None` sets no cap."""


class Caller(NamedTuple):
    """Who calls a channel's tool: the member, and the agent loop it acts in."""

    member: str
    """The calling member's name."""

    loop: str | None
    """The agent span of the loop that calls: the member's own, or one of its subagents'."""

    own: bool
    """Whether that loop is the member's own."""

    tool_span: str | None
    """The span of the tool call."""


class Bus(Protocol):
    """The run's bus as a channel's state and tools use it (`ChannelRun.bus`).

    The runtime's bus implements it; a channel depends on this contract only, so a new
    channel plugs in without importing the runtime. A tool hands the bus a `Draft` with
    `send()`, which returns the delivered `Record` or raises the channel's refusal, and
    records what it shows with `read()`.
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
        """The agent span of the member's own loop.

        Args:
            member: The member's name.
        """
        ...

    def member_state(self, member: str) -> MemberState:
        """Whether the member is pending, running or has ended.

        Args:
            member: The member's name.
        """
        ...

    def send(self, channel: str, draft: Draft) -> Record:
        """Deliver a tool's draft as a record from the calling member, through the storm
        controls and the channel's `validate()`, `admit()` and `apply()`.

        Args:
            channel: The channel's `name`.
            draft: What the tool hands over.

        Returns:
            The delivered record.

        Raises:
            ToolError: The channel or the swarm refused the record (`Refused` names the
                control); the model sees the message as the tool's result.
        """
        ...

    def read(
        self,
        channel: str,
        caller: Caller,
        *,
        listing: bool,
        data: Mapping[str, JsonValue],
        shown: Mapping[str, str] | None = None,
    ) -> None:
        """Record a view of the channel's state (its `read` evidence).

        Args:
            channel: The channel's `name`.
            caller: Who views it (`caller()`).
            listing: Whether the view lists the state (a directory) rather than shows one
                item (a file): it counts as a listing or a read in the member's `comm`.
            data: The channel's data for the evidence.
            shown: The text the view showed of each record, by record id: under an
                activation policy the bus looks for it in the reader's next model inputs
                (its `exposed` evidence).
        """
        ...

    def may_read(self, channel: str, member: str) -> bool:
        """Whether the member is among the channel's readers (`Channel.readers`).

        Args:
            channel: The channel's `name`.
            member: The member's name.
        """
        ...

    @property
    def sequence(self) -> int:
        """The delivery number of the record being applied (in `apply()`), else of the last
        delivered: what `delivered` evidence calls `seq`."""
        ...

    @property
    def read_cutoff(self) -> int | None:
        """While a read cutoff lasts (`SwarmControl.read_cutoff()`), the `sequence` when it
        began: a read then shows no record delivered later. `None` otherwise."""
        ...


class Channel:
    """The base of channels, the approved paths by which members share information.

    To write one, subclass it, override `instructions()`, and return an instance from a factory
    decorated with `@swarm_channel`. The object is configuration and nothing more: every
    sample uses the same one.

    A channel that has tools and records sets `name` and `prefix` as well, and overrides
    `open()` so that each run of the swarm gets a `ChannelState` of its own. A channel made of
    instructions alone, such as `filesystem()`, leaves those unset.
    """

    name: str | None = None
    """The `Record.channel` of the channel's records, or `None` when it makes none. Unique among
    a swarm's channels."""

    prefix: str | None = None
    """What the ids of the channel's records start with (`"w"` makes `w-1`). Set if and only if
    `name` is, and unique among a swarm's channels."""

    reach: Literal["loop", "member"] = "loop"
    """Which of a member's agent loops get the channel's tools from `swarm_tools()`.

    `"loop"` (the default): only the member's own loop, the first in which it resolves
    `swarm_tools()`. `"member"`: also the member's nested loops, such as a `deepagent()`
    member's subagents, which then act as the member.
    """

    storm: StormControls = StormControls()
    """The storm controls the bus applies to the channel's records. By default there are
    none."""

    readers: frozenset[str] | None = None
    """The members that may read the channel's records, or `None` (the default) for every
    member. The bus delivers an addressed record only to readers and gives others no
    notices or news of the channel; the channel refuses their reads."""

    writers: frozenset[str] | None = None
    """The members that may send records through the channel, or `None` (the default) for
    every member. The bus refuses the records of others, as the control `writers`."""

    max_wait: int | None = None
    """The longest, in seconds, that this channel lets a `swarm_wait` last; `None` (the
    default) when its records wake no waits.

    Setting it commits `open()` to return a `WaitingState`. A wait may last as long as the
    largest `max_wait` among the run's open channels that set one.
    """

    hands_out_work: bool = False
    """Whether the channel's records give members work, such as tasks to do or messages to
    read; `False` (the default) for a channel whose work is always settled.

    Setting it commits `open()` to return a `WorkState`, which controllers ask through
    `SwarmControl.outstanding()` and `assigned()`. `swarm()` refuses a controller that starts
    members on their work, such as `coordinator()`, when no channel of the swarm sets it.
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
    """The line's text, a fixed template filled in with counts, ids the swarm gave out and
    roster names only: nothing a member wrote or picked ever goes in."""

    ids: Mapping[str, JsonValue]
    """The swarm ids the line mentions, e.g.
    `{"files": [{"file": "f-2", "version": 3, "record": "w-7"}]}`. The notice's metadata and
    its `notified` evidence carry them as `ids`."""


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
    """The state of one channel during one run of the swarm; only the bus changes it.

    No `await` comes between the bus's calls to `validate()`, `admit()` and `apply()`, so the
    state `admit()` checks is exactly the one `apply()` then changes.
    """

    def tools(self) -> list[Tool]:
        """The channel's tools, which deliver records through the run's bus.

        Returns:
            The tools, given to members by `swarm_tools()`.
        """
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
        """The lines of the member's next notice; what they name then counts as covered.

        The bus calls it at one of the member's turn boundaries, and only if it is going to
        add the notice, so every line returned reaches the member. Later calls leave a line
        out until what it names has changed.

        Args:
            member: The member the notice is for.

        Returns:
            The lines, none when nothing changed for the member.
        """
        ...


@runtime_checkable
class WaitingState(ChannelState, Protocol):
    """The state of a channel whose records can wake waits, that is, one with
    `Channel.max_wait` set.

    No `await` separates the bus's calls to these methods from its own work. Calling them marks
    nothing as seen: a loop acknowledges what a wait named only by reading it with the
    channel's own tool.
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

        Returns:
            True when the wait should return to look at it.
        """
        ...

    def news(self, spec: WaitSpec) -> WaitNews | None:
        """What is reportable to a wait now.

        Args:
            spec: The wait.

        Returns:
            The news for the wait's result, or `None` when there is none yet.
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

    The channel keeps the arguments its factory was called with: the log shows them, and the
    channel can be built again from the log. Inside a package, the factory's registered name is
    `<package>/<name>`.

    Args:
        func: A function returning a `Channel`.
        name: The registered name, in place of the function's name.

    Returns:
        The registered factory.
    """
    return registered_factory("swarm_channel", func, name)
