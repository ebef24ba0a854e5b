"""A channel written on inspect_swarm's public names alone: a guestbook each member signs once.

Each member gets a `guestbook` tool. `sign` hands the swarm's bus a `Draft`; the bus makes it a
`Record` from the calling member and passes it to the channel, which refuses a second
signature (`Refused`, which the swarm counts in the member's `comm.rejections`). `read` shows
the signatures and records the view. Between turns, a member hears of new signatures.
Offline, on the scripted model:

    inspect eval examples/guestbook.py --model scripted/demo -M script=examples/guestbook.yaml
"""

from collections.abc import Mapping

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, ToolDef, ToolError
from pydantic import JsonValue

from inspect_swarm import (
    Bus,
    Channel,
    ChannelRun,
    ChannelState,
    Draft,
    MemberInfo,
    NoticeLine,
    Record,
    Refused,
    member,
    swarm,
    swarm_channel,
    swarm_react,
)

GUESTBOOK = "guestbook"


class Guestbook:
    """One run's guestbook: the signatures in order, and how many each member has heard of."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.signatures: list[Record] = []
        self.heard: dict[str, int] = {}

    def tools(self) -> list[Tool]:
        async def execute(command: str, text: str = "") -> str:
            """Sign the swarm's guestbook once, or read it.

            Args:
                command: `sign` to add your line, `read` to see every line.
                text: For `sign`: your line.
            """
            if command == "sign":
                record = self.bus.send(GUESTBOOK, Draft("sign", text))
                return f"Signed ({record.id})."
            if command == "read":
                self.bus.read(GUESTBOOK, self.bus.caller(), listing=True, data={})
                lines = [f"{r.sender}: {r.payload}" for r in self.signatures]
                return "\n".join(lines) or "No one has signed yet."
            raise ToolError(f"Unknown command {command!r}: use sign or read.")

        return [ToolDef(execute, name=GUESTBOOK).as_tool()]

    def validate(self, record: Record) -> None:
        if not record.payload.strip():
            raise ToolError("sign needs text, your line (not empty).")

    def admit(self, record: Record) -> None:
        if any(r.sender == record.sender for r in self.signatures):
            raise Refused("once", f"{record.sender} has signed already: each member signs once.")

    def apply(self, record: Record) -> tuple[list[str], Mapping[str, JsonValue] | None]:
        self.signatures.append(record)
        return [], {"line": len(self.signatures)}

    def notice_lines(self, member: str) -> list[NoticeLine]:
        new = [r for r in self.signatures[self.heard.get(member, 0) :] if r.sender != member]
        self.heard[member] = len(self.signatures)
        if not new:
            return []
        ids: list[JsonValue] = [r.id for r in new]
        return [NoticeLine(f"{len(new)} new guestbook line(s).", {"records": ids})]


class GuestbookChannel(Channel):
    """The guestbook: a tool to sign and read, and records the swarm keeps."""

    name = GUESTBOOK
    prefix = "g"

    def open(self, run: ChannelRun) -> ChannelState:
        return Guestbook(run.bus)

    def instructions(self, member: MemberInfo) -> str | None:
        return "Guestbook: sign it once with the guestbook tool, and read what others wrote."


@swarm_channel
def guestbook() -> Channel:
    """A guestbook every member signs once."""
    return GuestbookChannel()


@task
def guestbook_signing(k: int = 2) -> Task:
    return Task(
        dataset=[Sample(input="Sign the guestbook, then answer: what is 6 times 7?", target="42")],
        solver=swarm(
            members=member(swarm_react, name="guest", count=k),
            channels=[guestbook()],
        ),
        scorer=includes(),
    )
