"""What the built-in channels share: their argument checks, the fence rule, each agent loop's
news, and the frame of a channel tool's result."""

from __future__ import annotations

import bisect
import re
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from inspect_ai.tool import ToolError

from .._contracts._channel import Bus, Caller
from .._contracts._record import RUN_ENDED, Refused

# -- the factories' arguments ----------------------------------------------------------------


def whole_number(factory: str, arg: str, value: object, low: int, high: int) -> int:
    """`value`, a whole number from `low` to `high`, or a `ValueError` naming `factory(arg)`."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(
            f"{factory}(): {arg} must be a whole number from {low:,} to {high:,}, not {value!r}."
        )
    return value


def rate_window(factory: str, rate: object) -> tuple[int, float] | None:
    """A `(count, seconds)` rate, or `None` for no limit; a `ValueError` for anything else."""
    if rate is None:
        return None
    if isinstance(rate, tuple | list) and len(rate) == 2:
        count, seconds = rate
        if (
            isinstance(count, int)
            and not isinstance(count, bool)
            and count >= 1
            and isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and seconds > 0
        ):
            return count, float(seconds)
    raise ValueError(
        f"{factory}(): rate must be (count, seconds) with a count of at least 1 and a "
        f"positive number of seconds, such as (60, 60.0), or None for no limit; not {rate!r}."
    )


# -- the fence rule ----------------------------------------------------------------------------

_FENCE = re.compile(r"</?peer_(?:file|listing|message)", re.IGNORECASE)


def member_names(factory: str, arg: str, value: object) -> frozenset[str] | None:
    """A channel's `readers` or `writers`: member names, or `None` for every member."""
    if value is None:
        return None
    names = list(value) if isinstance(value, Iterable) and not isinstance(value, str) else [None]
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"{factory}({arg}=...): {value!r} is not a list of member names. Give names such "
            f'as ["alice", "bob"], or None for every member.'
        )
    return frozenset(str(n) for n in names)


def check_reader(bus: Bus, channel: str, caller: Caller) -> None:
    """Refuse a read by a member that is not among the channel's readers."""
    if not bus.may_read(channel, caller.member):
        raise ToolError(
            f"You may not read {channel}: {caller.member} is not among its readers. Use the "
            "channels you can read."
        )


def shown_now(bus: Bus, seq: int) -> bool:
    """Whether a record delivered as `seq` may be shown: not during a read cutoff that began
    before it."""
    cutoff = bus.read_cutoff
    return cutoff is None or seq <= cutoff


def fence_free(text: str, subject: str, place: str, verb: str = "Write") -> None:
    """Refuse text that holds a fence tag of the swarm, which could fake a peer's fence."""
    match = _FENCE.search(text)
    if match:
        raise Refused(
            "fence",
            f"{verb} refused: {subject} would contain {match.group(0)!r}, a fence tag of the "
            "swarm. Leave the tags <peer_file, <peer_listing and <peer_message (and their "
            f"closing tags) out of {place}.",
        )


def check_text(noun: str, text: str, held: int, most: int, max_bytes: int) -> None:
    """Refuse one more message or note (`noun`) past the channel's `max_<noun>s` or
    `max_<noun>_bytes`, or with a fence tag."""
    verb = noun.capitalize()
    if held >= most:
        raise Refused(
            f"max_{noun}s",
            f"{verb} refused: the swarm has {held} {noun}s, its max_{noun}s. Share the rest "
            "on another channel.",
        )
    nbytes = len(text.encode())
    if nbytes > max_bytes:
        raise Refused(
            f"max_{noun}_bytes",
            f"{verb} refused: it has {nbytes} bytes, over max_{noun}_bytes ({max_bytes}). "
            "Shorten it or split it into several.",
        )
    fence_free(text, f"the {noun}", f"{noun}s", verb=verb)


def plural(n: int) -> str:
    return "" if n == 1 else "s"


NAMED = 20
"""The most items a status line, notice or wait result names one by one."""

U = TypeVar("U")


def listed(items: Sequence[U], show: Callable[[U], str] = str) -> str:
    """The first `NAMED` items, shown and joined, and how many more there are."""
    shown = ", ".join(show(item) for item in items[:NAMED])
    return shown if len(items) <= NAMED else f"{shown} and {len(items) - NAMED} more"


# -- each loop's news --------------------------------------------------------------------------


class Item(Protocol):
    """Something a channel's loops see change: a file, a task, a note."""

    @property
    def id(self) -> str: ...

    @property
    def number(self) -> int: ...

    @property
    def version(self) -> int: ...

    @property
    def loop(self) -> str | None:
        """The agent loop that made the current version."""
        ...

    @property
    def writer(self) -> str: ...


T = TypeVar("T", bound=Item)


class Unseen(Generic[T]):
    """Items in number order, with their ids, kept exact by each change: naming them costs a
    join of the ids, with no scan or sort of the channel."""

    __slots__ = ("ids", "items", "line", "numbers")

    def __init__(self) -> None:
        self.items: dict[int, T] = {}
        self.numbers: list[int] = []
        self.ids: list[str] = []
        # the status line naming them, until an item joins or leaves them
        self.line: str | None = None

    def drop(self, item: T) -> None:
        if self.items.pop(item.number, None) is not None:
            at = bisect.bisect_left(self.numbers, item.number)
            del self.numbers[at], self.ids[at]
            self.line = None

    def keep(self, item: T) -> None:
        if item.number not in self.items:
            self.items[item.number] = item
            at = bisect.bisect_left(self.numbers, item.number)
            self.numbers.insert(at, item.number)
            self.ids.insert(at, item.id)
            self.line = None

    def values(self) -> list[T]:
        items = self.items
        return [items[n] for n in self.numbers]


class LoopView(Unseen[T]):
    """One agent loop's view of a channel: the version of each item it has seen, and the
    items another loop changed that it has not seen since."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, int] = {}

    def saw(self, item: T) -> None:
        """The loop has seen the item's current version."""
        self.seen[item.id] = item.version
        self.drop(item)


class Views(Generic[T]):
    """Every agent loop's view of one channel's items, and what each member's notices named.

    A loop that first looks has seen nothing, so every item another loop made is news to it.
    """

    def __init__(self, bus: Bus, items: Callable[[], Iterable[T]]) -> None:
        self._bus = bus
        self._items = items
        self._loops: dict[str | None, LoopView[T]] = {}
        self._notified: dict[str, dict[str, int]] = {}

    def loop(self, loop: str | None) -> LoopView[T]:
        view = self._loops.get(loop)
        if view is None:
            view = LoopView[T]()
            for item in self._items():
                if item.loop != loop:
                    view.keep(item)
            self._loops[loop] = view
        return view

    def changed(self, item: T) -> None:
        """An item has a new version: news to every loop but the one that made it, in
        O(loops) whatever the size of the channel."""
        for loop, view in self._loops.items():
            if loop == item.loop:
                view.drop(item)
            else:
                view.keep(item)

    def removed(self, item: T) -> None:
        """An item is gone: news to no loop."""
        for view in self._loops.values():
            view.drop(item)

    def fresh(self, member: str) -> list[T]:
        """What the member's own loop has not seen and no notice has named in its current
        version; from now on a notice has named it."""
        notified = self._notified.setdefault(member, {})
        fresh = [
            item
            for item in self.loop(self._bus.own_loop(member)).values()
            if notified.get(item.id) != item.version
        ]
        for item in fresh:
            notified[item.id] = item.version
        return fresh


# -- a channel tool's result -------------------------------------------------------------------

S = TypeVar("S")


class Handles(Generic[S]):
    """A tool's run-time state and bus, held weakly: inspect_ai keeps every tool function it
    has described, so a tool must not keep its run's state alive once the run has ended."""

    __slots__ = ("_bus", "_state")

    def __init__(self, state: S, bus: Bus) -> None:
        self._state = weakref.ref(state)  # type: ignore[arg-type]
        self._bus = weakref.ref(bus)

    def get(self) -> tuple[S, Bus]:
        state, bus = self._state(), self._bus()
        if state is None or bus is None:
            raise ToolError(RUN_ENDED)
        return state, bus  # type: ignore[return-value]


def with_status(command: Callable[[], str], status: Callable[[], str]) -> str:
    """A command's result, or its error, followed by the channel's status line."""
    try:
        result = command()
    except ToolError as error:
        raise ToolError(f"{error.message}\n{status()}") from None
    return f"{result}\n{status()}"
