"""A small channel that holds work still to be done, written against the Channel API only, for the
tests of `WorkState`: `outstanding()` in the quiescence stop, `assigned()` in controllers."""

from __future__ import annotations

from collections.abc import Mapping

from inspect_ai.tool import Tool, tool
from pydantic import JsonValue

from inspect_swarm import (
    Assignment,
    Channel,
    ChannelRun,
    ChannelState,
    NoticeLine,
    Outstanding,
    Record,
    swarm_channel,
)
from inspect_swarm._contracts._record import Draft


class TodoState:
    """Items that are open until someone marks them done; each may be assigned to a member.
    An item the channel starts with was put there by `lead`."""

    def __init__(self, run: ChannelRun, items: Mapping[str, str | None]) -> None:
        self._bus = run.bus
        self.open: dict[str, tuple[str | None, str]] = {
            item: (who, "lead") for item, who in items.items()
        }

    def tools(self) -> list[Tool]:
        return [todo_tool(self)]

    def validate(self, record: Record) -> None:
        return None

    def admit(self, record: Record) -> None:
        return None

    def apply(self, record: Record) -> tuple[list[str], Mapping[str, JsonValue] | None]:
        assignee = None if record.op is None else record.op.get("assignee")
        if record.kind == "add":
            who = assignee if isinstance(assignee, str) else None
            self.open[record.payload] = (who, record.sender)
        else:
            self.open.pop(record.payload, None)
        return [], None

    def notice_lines(self, member: str) -> list[NoticeLine]:
        return []

    def outstanding(self) -> Outstanding:
        return Outstanding(open=tuple(self.open))

    def assigned(self, member: str) -> list[Assignment]:
        return [
            Assignment("todo", item, "task", by, "open")
            for item, (who, by) in self.open.items()
            if who == member
        ]


def todo_tool(state: TodoState) -> Tool:
    @tool(name="todo")
    def make() -> Tool:
        async def execute(command: str, item: str, assignee: str | None = None) -> str:
            """Add an item to the shared to-do list, or mark one done.

            Args:
                command: `add` or `done`.
                item: The item.
                assignee: For `add`, the member who should do it.
            """
            op = {"assignee": assignee} if assignee else None
            state._bus.send("todo", Draft(command, item, op))
            return f"{command}: {item}"

        return execute

    return make()


class TodoChannel(Channel):
    name = "todo"
    prefix = "t"
    hands_out_work = True

    def __init__(self, items: Mapping[str, str | None]) -> None:
        self.items = items

    def open(self, run: ChannelRun) -> ChannelState:
        return TodoState(run, self.items)


@swarm_channel
def todo(items: dict[str, str | None] | None = None) -> Channel:
    """A to-do list that starts with `items` (item: assignee), open until marked done."""
    return TodoChannel(items or {})
