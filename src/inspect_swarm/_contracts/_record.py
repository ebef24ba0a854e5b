from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeAlias

from inspect_ai.tool import ToolError
from pydantic import JsonValue

FrozenJson: TypeAlias = (
    str | int | float | bool | tuple["FrozenJson", ...] | Mapping[str, "FrozenJson"] | None
)
"""JSON that cannot be changed: objects are read-only mappings and arrays are tuples."""


# JSON's scalars, which freeze and thaw return as they are, checked first as the commonest
_SCALARS = (str, int, float, bool, type(None))


def freeze(value: JsonValue) -> FrozenJson:
    """A read-only copy of JSON."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: FrozenJson) -> JsonValue:
    """Plain JSON (dicts and lists) from frozen JSON, for the log."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    # what freeze() makes is checked before any other mapping, as that check is slow
    if isinstance(value, MappingProxyType | dict | Mapping):
        return {k: thaw(v) for k, v in value.items()}
    return value


RUN_ENDED = "This tool belongs to a run of the swarm that has ended."

ALL = "all"
"""The address of every member but the sender."""

ROLE = "role:"
"""The prefix of a role's address (`role:reviewer`): the members with that role, but the
sender."""


@dataclass(frozen=True)
class Draft:
    """What a channel's tool hands the bus: a record before the bus binds its sender."""

    kind: str
    """What the record does, in the channel's terms (`"message"`, `"create"`)."""

    payload: str = ""
    """The text the record carries."""

    op: Mapping[str, JsonValue] | None = None
    """The channel's operation data, if any."""

    to: tuple[str, ...] = ()
    """The addresses as written, each a member's name, `role:<role>` or `all`; `()` for an
    unaddressed record."""

    wake: bool = False
    """Whether the record can end a member's wait."""

    reply_to: str | None = None
    """The id of a record this one answers."""


@dataclass(frozen=True)
class Record:
    """One communication through the bus: a message, a write, a claim.

    A channel's tool gives the bus a `Draft`. From it the bus builds the record (it sets the
    sender and resolves the addresses) and passes the record on to the channel.
    """

    id: str
    """The record's id, the channel's prefix and a per-channel number (`"w-14"`).

    An id goes to every attempt that gets past the bus's first checks, whether it is then
    refused or not, so delivered records may have gaps between their ids. To count what the
    run delivered over all its channels, read `seq` in the `delivered` evidence.
    """

    channel: str
    """The name of the channel the record is for."""

    kind: str
    """What the record does, in the channel's terms (`"message"`, `"create"`)."""

    sender: str
    """The sending member's name, bound by the runtime, never taken from model output."""

    to: tuple[str, ...] = ()
    """The addresses as the sender wrote them; `()` when the record has no address (a write to
    shared state, for instance, goes to no one in particular)."""

    recipients: tuple[str, ...] = ()
    """The member names the addresses resolved to."""

    routed_out: tuple[str, ...] = ()
    """Resolved names the channel's routes dropped."""

    payload: str = ""
    """The text the record carries."""

    op: Mapping[str, FrozenJson] | None = None
    """The channel's operation data, or `None`, as frozen JSON (read-only mappings for
    objects, tuples for arrays). The channel and the sender's tool hold the same record, and
    freezing keeps either from altering what the other sees."""

    wake: bool = False
    """Whether the record can end a member's wait (`swarm_wait`)."""

    reply_to: str | None = None
    """The id of a record this one answers."""

    sender_span_id: str | None = None
    """The sender's agent span."""

    tool_span_id: str | None = None
    """The tool span the call ran in."""


class Refused(ToolError):
    """A record the swarm refused, naming the control that refused it (`"rate"`).

    A channel's `admit()` raises it for a record the state as it is now cannot take; the bus
    counts it in the sender's `comm.rejections` under `control`, logs it in the `sent`
    evidence, and the model sees `message` as the tool's result.

    Args:
        control: The control that refused the record, a short name (`"rate"`, `"once"`).
        message: What the model is told, with the fix.
    """

    def __init__(self, control: str, message: str) -> None:
        super().__init__(message)
        self.control = control
        """The control that refused the record."""
