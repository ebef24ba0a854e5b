from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, cast

import anyio
from inspect_ai._util.logger import warn_once
from inspect_ai.event import ModelEvent
from inspect_ai.log import transcript
from inspect_ai.model import ChatMessage, ChatMessageUser
from inspect_ai.tool import Tool, ToolError
from inspect_ai.util._span import current_agent_span_id, current_span_id
from pydantic import JsonValue

from ..._context import SwarmHost, current_member
from ..._contracts._channel import (
    Caller,
    Channel,
    ChannelRun,
    ChannelState,
    WaitingState,
    WaitSpec,
)
from ..._contracts._record import ALL, ROLE, Draft, Record, Refused, freeze, thaw
from ..._contracts._roster import MemberState
from ..._contracts._schema import EVIDENCE_SOURCE
from ..._contracts._status import WaitOutcome
from ..._contracts._work import Assignment, Outstanding, WorkState
from .._member_run import ChannelComm, MemberComm
from ._evidence import EvidenceLog
from ._exposure import Claim, ExposureWatch
from ._storm import RateWindow
from ._wait import swarm_wait

# how often a wait re-checks a member whose background work keeps it from being idle
_BACKGROUND_POLL = 0.25

logger = logging.getLogger(__name__)

EvidenceKind = Literal["sent", "delivered", "read", "notified", "waited", "exposed"]
"""The kinds of `comm` evidence the bus logs."""

_BUILDER = (
    "in a registered member builder passed to member() uncalled, e.g. `@agent def worker() -> "
    "Agent: return react(tools=[swarm_tools()], on_continue=swarm_on_continue())` with "
    "`member(worker, ...)`; or use the built-in builder, `member(swarm_react, args={...})` "
    "(from the command line, -S 'members={factory: swarm_react}')"
)
_WIRING = {
    "swarm_tools": (
        "made a model call without the tools of the swarm's channels ({channels}): its agent "
        "never resolved swarm_tools(), so it cannot use them.",
        f"Put swarm_tools() in its agent's tools {_BUILDER}. A bridged agent takes them as "
        "host tools: pass bridged_tools=[swarm_bridged_tools()] to its agent or to "
        "sandbox_agent_bridge(), in its builder.",
        "made model calls without the channels' tools (swarm_tools() not wired)",
    ),
    "swarm_on_continue": (
        "reached its second model call without running swarm_on_continue(), so it gets no "
        "notices of what the other members change.",
        f"Make swarm_on_continue() its agent's on_continue (around the hook it had, "
        f"swarm_on_continue(inner)) {_BUILDER}. An agent that calls no on_continue hook "
        'needs member(..., delivery="poll") instead.',
        "went on without notices (swarm_on_continue() not wired)",
    ),
}
"""Per missing piece of wiring: what the member did without it, how to wire it, and the gist
for the console's one warning."""


class BusWatcher(Protocol):
    """What the run learns from the bus as it happens, for its controller."""

    def record_delivered(self, record: Record, recipients: Sequence[str]) -> None:
        """A channel delivered a record."""
        ...

    def hold_all_waiting(self) -> bool:
        """Every member is waiting: whether the run holds the waits (it releases them later
        with `release_all_waiting()`) rather than have them end now."""
        ...

    def waiting_for_turn(self, name: str) -> bool:
        """The member has finished a turn and waits for the controller's next."""
        ...


@dataclass
class _Open:
    channel: Channel
    state: ChannelState
    name: str
    prefix: str
    tools: list[Tool]
    # whether the state wakes waits, or hands out work, checked once: a protocol
    # isinstance() is slow
    waiting: bool
    working: bool
    numbers: int = 0
    rates: dict[str, RateWindow] = field(default_factory=dict)

    def rate(self, member: str) -> RateWindow | None:
        limit = self.channel.storm.rate
        if limit is None:
            return None
        return self.rates.setdefault(member, RateWindow(*limit))


@dataclass
class _Wait:
    spec: WaitSpec
    event: anyio.Event = field(default_factory=anyio.Event)
    outcome: WaitOutcome | None = None

    def release(self, outcome: WaitOutcome) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self.event.set()


class SwarmBus:
    """The communication of one swarm run: every channel's records, waits and notices.

    It implements the channels' `Bus` contract and the members' `MemberBus`.
    """

    def __init__(
        self,
        host: SwarmHost,
        channels: Sequence[Channel],
        comms: Mapping[str, MemberComm],
        watcher: BusWatcher | None = None,
        *,
        routes: Collection[tuple[str, str]] | None = None,
        exposure: bool = False,
        manual_exposure: Collection[str] = (),
    ) -> None:
        """Open every channel for the run; `comms` is where each member's communication is
        counted (its `MemberRun.comm`), and `watcher` hears of records and waits. `routes`
        are the (sender, recipient) pairs an addressed record may take (`None`: any), and
        `exposure` has the bus look for what members were shown in their model inputs, but
        for those of the `manual_exposure` members, which their experiment observes."""
        self._host = host
        self._routes = None if routes is None else frozenset(routes)
        self._exposure = ExposureWatch(manual_exposure) if exposure else None
        self._reads_numbered = 0
        self._cutoff: int | None = None
        self._watcher = watcher
        self._evidence_log = EvidenceLog()
        self._roster = list(host.roster)
        self._channels: dict[str, _Open] = {}
        for channel in channels:
            self._open(channel)
        self.has_tools = any(o.tools for o in self._channels.values())
        waits = [o.channel.max_wait for o in self._channels.values() if o.channel.max_wait]
        self.wakes_waits = bool(waits)
        self.max_wait: int | None = max(waits) if waits else None
        self._stopping = False
        self._seq = 0
        self._waits_numbered = 0
        self._notices_numbered = 0
        self._pending: dict[str, _Wait] = {}
        self._waits: Counter[str] = Counter()  # waits in progress by member, from any loop
        self._quiet_since: float | None = None  # since when every member has been waiting
        self._ended: list[tuple[str, str | None]] = []
        self._own_loops: dict[str, str | None] = {}
        self._continued: set[str] = set()
        self._sender_loops: set[str | None] = set()
        self._members = comms
        for comm in comms.values():
            comm.channels.update((name, ChannelComm()) for name in self._channels)
        self._tool_lists: dict[bool, list[Tool]] = {}
        self._warned: set[tuple[str, str]] = set()

    def _open(self, channel: Channel) -> None:
        state = channel.open(ChannelRun(self, self._roster))
        if state is None:
            return
        if channel.name is None or channel.prefix is None:
            raise TypeError(
                f"{type(channel).__name__}.open() returned a state but the channel has no "
                "`name` and `prefix`: a channel with records sets both."
            )
        if channel.max_wait is not None and not isinstance(state, WaitingState):
            raise TypeError(
                f"{type(channel).__name__} sets max_wait but its state does not implement "
                "WaitingState (wait_check, wakes, news)."
            )
        if channel.hands_out_work != isinstance(state, WorkState):
            raise TypeError(
                f"{type(channel).__name__}: hands_out_work is {channel.hands_out_work} but its "
                f"state {'does not implement' if channel.hands_out_work else 'implements'} "
                "WorkState (outstanding, assigned). Set hands_out_work exactly when the state "
                "implements it."
            )
        self._channels[channel.name] = _Open(
            channel,
            state,
            channel.name,
            channel.prefix,
            state.tools(),
            waiting=isinstance(state, WaitingState),
            working=channel.hands_out_work,
        )

    # -- who calls -------------------------------------------------------------------------

    def caller(self) -> Caller:
        """The member and loop the calling tool acts for."""
        member = current_member()
        if member is None or member not in self._members:
            raise ToolError("This tool can only be used by a member of the swarm.")
        loop = current_agent_span_id()
        return Caller(member, loop, loop == self.own_loop(member), current_span_id())

    def own_loop(self, member: str) -> str | None:
        """The agent span of the member's own loop: the first that resolved `swarm_tools()`."""
        if member in self._own_loops:
            return self._own_loops[member]
        return self._host.member_span_id(member)

    def member_state(self, member: str) -> MemberState:
        return self._host.member_state(member)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def clock(self) -> float:
        return self._host.clock()

    def channel_tools(self, member: str) -> list[Tool]:
        """The tools the calling loop of `member` gets from `swarm_tools()`."""
        loop = current_agent_span_id()
        self._own_loops.setdefault(member, loop)
        own = loop == self._own_loops[member]
        if own not in self._tool_lists:
            self._tool_lists[own] = self._tools_for(own)
        return self._tool_lists[own]

    def _tools_for(self, own: bool) -> list[Tool]:
        reached = [o for o in self._channels.values() if own or o.channel.reach == "member"]
        tools = [t for o in reached for t in o.tools]
        waking = [o.channel for o in reached if o.channel.max_wait]
        if waking:
            paths = [c.wait_path for c in waking if c.wait_path]
            tools.append(swarm_wait(self, " ".join(paths) or None))
        return tools

    # -- records ---------------------------------------------------------------------------

    def send(self, channel: str, draft: Draft) -> Record:
        """Deliver a channel tool's draft as a record from the calling member.

        Raises:
            ToolError: The draft is not valid for the channel.
            Refused: A control refused the record (recorded in the `sent` evidence).
        """
        opened = self._channels[channel]
        caller = self.caller()
        # the number is taken only once the record is valid
        record = Record(
            id=f"{opened.prefix}-{opened.numbers + 1}",
            channel=channel,
            kind=draft.kind,
            sender=caller.member,
            to=draft.to,
            recipients=self._resolve(draft.to, caller.member),
            payload=draft.payload,
            op=freeze(dict(draft.op)) if draft.op is not None else None,  # type: ignore[arg-type]
            wake=draft.wake,
            reply_to=draft.reply_to,
            sender_span_id=caller.loop,
            tool_span_id=caller.tool_span,
        )
        opened.state.validate(record)
        opened.numbers += 1
        now = self.clock()
        rate = opened.rate(caller.member)
        try:
            if self._stopping:
                raise Refused("stopping", "Write refused: the swarm is stopping.")
            record = self._permitted(opened.channel, record)
            if rate is not None:
                rate.check(now)
            opened.state.admit(record)
        except Refused as refusal:
            self._members[caller.member].channels[channel].rejections[refusal.control] += 1
            self._sent(record, caller, refusal)
            raise
        self._sent(record, caller, None)
        self._seq += 1
        delivered_to, data = opened.state.apply(record)
        if rate is not None:
            rate.record(now)
        self._delivered(record, caller, delivered_to, data)
        if record.wake:
            self._wake(opened, record)
        if self._watcher is not None:
            self._watcher.record_delivered(record, delivered_to)
        return record

    def _permitted(self, channel: Channel, record: Record) -> Record:
        """The record with only the recipients its routes and the channel's readers allow.

        Raises:
            Refused: The sender is not among the channel's writers (`writers`), or no
                recipient is left (`route`).
        """
        sender = record.sender
        if channel.writers is not None and sender not in channel.writers:
            raise Refused(
                "writers",
                f"Write refused: {sender} may not write to {record.channel}; only "
                f"{', '.join(sorted(channel.writers)) or 'no member'} may.",
            )
        readers, routes = channel.readers, self._routes
        kept = tuple(
            r
            for r in record.recipients
            if (readers is None or r in readers) and (routes is None or (sender, r) in routes)
        )
        if len(kept) == len(record.recipients):
            return record
        if not kept:
            raise Refused(
                "route",
                f"Message refused: {sender} has no route to {', '.join(record.recipients)}. "
                "Send it to a member you may reach.",
            )
        dropped = tuple(r for r in record.recipients if r not in kept)
        return replace(record, recipients=kept, routed_out=dropped)

    def may_read(self, channel: str, member: str) -> bool:
        readers = self._channels[channel].channel.readers
        return readers is None or member in readers

    @property
    def sequence(self) -> int:
        return self._seq

    @property
    def read_cutoff(self) -> int | None:
        return self._cutoff

    @contextmanager
    def cutoff(self) -> Iterator[None]:
        """Reads inside the block show only the records delivered before it began."""
        self._cutoff = self._seq
        try:
            yield
        finally:
            self._cutoff = None

    def _resolve(self, to: tuple[str, ...], sender: str) -> tuple[str, ...]:
        """The members the addresses name: a member by its name, the members with a role
        by `role:<role>`, every member by `all` (the sender is not among those two)."""
        names: list[str] = []
        for address in to:
            role = address[len(ROLE) :] if address.startswith(ROLE) else None
            if address in self._members:
                names.append(address)
            elif address == ALL:
                names.extend(m.name for m in self._roster if m.name != sender)
            elif role and any(m.role == role for m in self._roster):
                names.extend(m.name for m in self._roster if m.role == role and m.name != sender)
            else:
                raise ToolError(self._unknown(address))
        return tuple(dict.fromkeys(names))

    def _unknown(self, address: str) -> str:
        roles = list(dict.fromkeys(f"{ROLE}{m.role}" for m in self._roster if m.role))
        forms = [f"a member by its name ({', '.join(self._members)})"]
        if roles:
            forms.append(f"the members with a role as {ROLE}<role> ({', '.join(roles)})")
        return (
            f"Unknown recipient {address!r}: address {', '.join(forms)}, or every other member "
            f"as {ALL!r}."
        )

    def _sent(self, record: Record, caller: Caller, refusal: Refused | None) -> None:
        self._evidence(
            "sent",
            record.channel,
            caller,
            record=record.id,
            op=record.kind,
            payload=record.payload,
            data=thaw(record.op) if record.op is not None else None,
            to=list(record.to),
            **({"routed_out": list[JsonValue](record.routed_out)} if record.routed_out else {}),
            reply_to=record.reply_to,
            refused=({"control": refusal.control, "message": refusal.message} if refusal else None),
        )

    def _delivered(
        self,
        record: Record,
        caller: Caller,
        delivered_to: list[str],
        data: Mapping[str, JsonValue] | None,
    ) -> None:
        self._sender_loops.add(caller.loop)
        comm = self._members[caller.member].channels[record.channel]
        comm.records += 1
        comm.record_bytes += len(record.payload.encode())
        self._evidence(
            "delivered",
            record.channel,
            caller,
            record=record.id,
            seq=self._seq,
            op=record.kind,
            recipients=list(delivered_to),
            **(data or {}),
        )

    def read(
        self,
        channel: str,
        caller: Caller,
        *,
        listing: bool,
        data: Mapping[str, JsonValue],
        shown: Mapping[str, str] | None = None,
    ) -> None:
        """Record a view of a channel's state (a file, or a listing)."""
        comm = self._members[caller.member].channels[channel]
        if listing:
            comm.listings += 1
        else:
            comm.reads += 1
        if self._exposure is None:
            self._evidence("read", channel, caller, listing=listing, **data)
            return
        self._reads_numbered += 1
        read_id = f"r-{self._reads_numbered}"
        self._evidence("read", channel, caller, read=read_id, listing=listing, **data)
        for record, text in (shown or {}).items():
            claim = Claim(channel, {"read": read_id}, record, text)
            self._exposure.claim(caller.member, caller.loop, claim)

    def _evidence(
        self, kind: EvidenceKind, channel: str | None, caller: Caller, **data: JsonValue
    ) -> None:
        member, loop, own, _ = caller
        self._evidence_log.log(
            {
                "type": "comm", "kind": kind, "channel": channel,
                "member": member, "loop": loop, "nested": not own, **data,
            }
        )  # fmt: skip

    # -- notices ---------------------------------------------------------------------------

    def notice(self, *, deliver: bool = True) -> ChatMessageUser | None:
        """The notice for the calling loop at its turn boundary, if it gets one.

        With `deliver=False` the loop only records that it ran the hook.
        """
        member = current_member()
        if member is None or member not in self._members:
            return None
        loop = current_agent_span_id()
        if loop != self.own_loop(member):
            return None
        self._continued.add(member)
        if (
            not deliver
            or self._stopping
            or self._host.stopping
            or self._host.delivery(member) == "poll"
        ):
            return None
        lines = [
            (name, line)
            for name, opened in self._channels.items()
            if self.may_read(name, member)
            for line in opened.state.notice_lines(member)
        ]
        if not lines:
            return None
        self._notices_numbered += 1
        notice_id = f"n-{self._notices_numbered}"
        caller = Caller(member, loop, True, current_span_id())
        for name in dict.fromkeys(name for name, _ in lines):
            self._members[member].channels[name].notices += 1
        for name, line in lines:
            self._evidence(
                "notified", name, caller, notice=notice_id, text=line.text, ids=dict(line.ids)
            )
            if self._exposure is not None:
                claim = Claim(name, {"notice": notice_id}, None, line.text)
                self._exposure.claim(member, loop, claim)
        return ChatMessageUser(
            content="[Swarm notice] " + "\n".join(line.text for _, line in lines),
            metadata={
                EVIDENCE_SOURCE: {
                    "notice": notice_id,
                    "lines": [{"channel": name, "ids": dict(line.ids)} for name, line in lines],
                }
            },
        )

    # -- waits -----------------------------------------------------------------------------

    async def wait(self, path: str | None, timeout: float | None) -> str:  # noqa: ASYNC109
        """Wait for news for the calling loop, and say what ended the wait."""
        assert self.max_wait is not None
        caller = self.caller()
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ToolError(f"timeout must be a positive number of seconds, not {timeout!r}.")
        limit = min(float(timeout or self.max_wait), float(self.max_wait))
        self._waits_numbered += 1
        spec = WaitSpec(f"x-{self._waits_numbered}", caller.member, caller.loop, caller.own, path)
        for state in self._waiting_states(spec.member):
            state.wait_check(spec)
        wait = _Wait(spec)
        start = self.clock()
        stats = self._members[caller.member]
        stats.waits += 1
        idle = 0.0
        try:
            wait.outcome = self._immediate(wait)
            if wait.outcome is None:
                self._pending[spec.id] = wait
                idle = await self._block(wait, anyio.current_time() + limit)
        finally:
            self._pending.pop(spec.id, None)
            outcome = wait.outcome or "cancelled"
            seconds = max(0.0, self.clock() - start)
            stats.outcomes[outcome] += 1
            stats.wait_time += seconds
            stats.idle_time += idle
            lines, files, ended = self._news(spec) if outcome == "news" else ([], [], [])
            self._evidence(
                "waited",
                None,
                caller,
                wait=spec.id,
                path=path,
                outcome=outcome,
                seconds=round(seconds, 6),
                timeout=limit,
                files=list[JsonValue](files),
                ended=[{"member": m, "status": s} for m, s in ended],
            )
        if outcome == "news":
            self._tell_ended(caller, ended)
        return _wait_result(outcome, lines, ended, limit)

    def _immediate(self, wait: _Wait) -> WaitOutcome | None:
        spec = wait.spec
        if self._stopping or self._host.stopping:
            return "stopping"
        if self._host.agent_returned(spec.member):
            return "member_ending"
        if self._has_news(spec):
            return "news"
        return None

    async def _block(self, wait: _Wait, deadline: float) -> float:
        """Block until the wait is released or `deadline` (anyio's clock); its idle seconds."""
        spec = wait.spec
        idle = 0.0
        self._waits[spec.member] += 1
        try:
            self.check_all_waiting()
            while True:
                now = self.clock()
                if wait.outcome == "news" and not self._has_news(spec):
                    wait.outcome, wait.event = None, anyio.Event()
                if wait.outcome is not None:
                    return idle
                left = deadline - anyio.current_time()
                if left <= 0:
                    wait.outcome = "timeout"
                    return idle
                busy = spec.own and self._host.background_running(spec.member) > 0
                with anyio.move_on_after(min(left, _BACKGROUND_POLL) if busy else left):
                    await wait.event.wait()
                if spec.own and not busy:
                    idle += max(0.0, self.clock() - now)
                if busy:
                    self.check_all_waiting()
        finally:
            self._waits[spec.member] -= 1
            self._quiet_since = None

    def _waiting_states(self, member: str) -> Iterator[WaitingState]:
        for name, opened in self._channels.items():
            if opened.channel.max_wait is not None and self.may_read(name, member):
                yield cast(WaitingState, opened.state)

    def _untold_ended(self, spec: WaitSpec) -> list[tuple[str, str | None]]:
        told = self._members[spec.member].ended_told.get(spec.loop, 0)
        return [(m, s) for m, s in self._ended[told:] if m != spec.member]

    def _has_news(self, spec: WaitSpec) -> bool:
        if self._untold_ended(spec):
            return True
        return any(state.news(spec) is not None for state in self._waiting_states(spec.member))

    def _news(
        self, spec: WaitSpec
    ) -> tuple[list[str], list[dict[str, JsonValue]], list[tuple[str, str | None]]]:
        lines: list[str] = []
        files: list[dict[str, JsonValue]] = []
        for state in self._waiting_states(spec.member):
            news = state.news(spec)
            if news is not None:
                lines.extend(news.lines)
                files.extend(news.files)
        return lines, files, self._untold_ended(spec)

    def _tell_ended(self, caller: Caller, ended: list[tuple[str, str | None]]) -> None:
        if ended:
            self._members[caller.member].ended_told[caller.loop] = len(self._ended)

    def _wake(self, opened: _Open, record: Record) -> None:
        if not opened.waiting or not self._pending:
            return
        state = cast(WaitingState, opened.state)
        for wait in list(self._pending.values()):
            if wait.outcome is None and state.wakes(wait.spec, record):
                wait.release("news")

    def _release(self, outcome: WaitOutcome, member: str | None = None) -> None:
        for wait in list(self._pending.values()):
            if member is None or wait.spec.member == member:
                wait.release(outcome)

    def _member_waiting(self, name: str) -> bool:
        state = self._host.member_state(name)
        if state != "running":
            return True
        # every line of its work waits: its own loop (or a synchronous subagent of it), and
        # each running background task, each of which can be in one wait at a time; an own
        # loop that has finished a turn waits for the controller
        held = self._watcher is not None and self._watcher.waiting_for_turn(name)
        return self._waits[name] + held > self._host.background_running(name)

    def _all_waiting(self) -> bool:
        return bool(self._pending) and all(self._member_waiting(m.name) for m in self._roster)

    def check_all_waiting(self) -> None:
        """End the waits with `all_waiting` if every member waits, unless the watcher holds them."""
        if not self._all_waiting():
            return
        if self._quiet_since is None:
            self._quiet_since = self.clock()
        if self._watcher is None or not self._watcher.hold_all_waiting():
            self._release("all_waiting")

    def waiting_since(self) -> float | None:
        """Since when every member has been waiting, has ended or has not started, or `None`."""
        if not self._all_waiting():
            self._quiet_since = None
        return self._quiet_since

    def release_all_waiting(self) -> None:
        """End the waits the watcher held, if every member still waits."""
        if self._all_waiting():
            self._release("all_waiting")

    # -- the runtime's calls ---------------------------------------------------------------

    def member_started(self, name: str) -> None:
        """A member has started (it is no longer `pending`), or taken another turn."""
        self._members[name].ended_told.setdefault(None, 0)
        self._quiet_since = None

    def agent_returned(self, name: str) -> None:
        """The member's own agent has finished: its waits end with `member_ending`."""
        self._release("member_ending", name)
        self.check_all_waiting()

    def member_ended(self, name: str) -> None:
        """A member has ended: news for every other member's waits."""
        self._ended.append((name, self._host.member_status(name)))
        for wait in list(self._pending.values()):
            if wait.spec.member != name:
                wait.release("news")
        self.check_all_waiting()

    def begin_stop(self) -> None:
        """The swarm begins to stop: writes are refused from now on and every wait ends."""
        self._stopping = True
        self._release("stopping")

    def close(self) -> None:
        """The run has ended."""
        self.begin_stop()

    # -- work --------------------------------------------------------------------------------

    def outstanding(self) -> dict[str, Outstanding]:
        """What each channel that hands out work (its state is a `WorkState`) holds open or
        unread now, by channel name; settled channels are left out, so `{}` means none."""
        found: dict[str, Outstanding] = {}
        for name, o in self._channels.items():
            if o.working:
                held = cast(WorkState, o.state).outstanding()
                if not held.settled:
                    found[name] = held
        return found

    def assigned(self, member: str) -> list[Assignment]:
        """The work the swarm's channels have given `member` and it has not finished, channel
        by channel in the order of `swarm(channels=...)`."""
        return [
            assignment
            for o in self._channels.values()
            if o.working
            for assignment in cast(WorkState, o.state).assigned(member)
        ]

    # -- metrics ---------------------------------------------------------------------------

    def member_metrics(self, name: str) -> dict[str, JsonValue]:
        """The communication part of a member's metrics, from its `MemberRun.comm`; the wait
        counts only when a channel of the run wakes waits."""
        comm = self._members[name]
        waits = self.wakes_waits
        exposure = {} if self._exposure is None else {"exposure": self._exposure.coverage(name)}
        return {
            **exposure,
            "comm": {channel: c.as_json() for channel, c in comm.channels.items()},
            "waits": comm.waits if waits else None,
            "waits_by_outcome": dict[str, JsonValue](comm.outcomes.items()) if waits else None,
            "wait_time": round(comm.wait_time, 6) if waits else None,
            "idle_time": round(comm.idle_time, 6) if waits else None,
        }

    def wiring(self) -> dict[str, list[str]]:
        """Members that did not get what the channels offer."""
        notify_unwired = [
            m.name
            for m in self._roster
            if self._misses_notices(m.name)
            and any(loop != self.own_loop(m.name) for loop in self._sender_loops)
        ]
        tools_unwired = [m.name for m in self._roster if self._misses_tools(m.name)]
        return {"notify_unwired": notify_unwired, "tools_unwired": tools_unwired}

    def _misses_tools(self, member: str) -> bool:
        """The member made a model call, and its loops never resolved `swarm_tools()`."""
        return self.has_tools and self._members[member].calls >= 1 and member not in self._own_loops

    def _misses_notices(self, member: str) -> bool:
        """A `notify` member's own loop made two model calls without running the hook."""
        return (
            self._host.delivery(member) == "notify"
            and member not in self._continued
            and self._members[member].own_calls >= 2
        )

    def _warn_wiring(self, member: str) -> None:
        """Say, once per member and piece, that a member misses the swarm's tools or notices,
        in a `wiring` event; and once per piece, in a warning in Python's logging (Inspect's
        console and log)."""
        missing = [
            piece
            for piece, misses in (
                ("swarm_tools", self._misses_tools),
                ("swarm_on_continue", self._misses_notices),
            )
            if (member, piece) not in self._warned and misses(member)
        ]
        for piece in missing:
            self._warned.add((member, piece))
            done, fix, gist = _WIRING[piece]
            channels = ", ".join(name for name, o in self._channels.items() if o.tools)
            # the console says it once; the events say who and how to fix it
            warn_once(
                logger,
                f"inspect_swarm: members {gist}. The swarm's summary names them and its "
                "`wiring` events give the fix; member(swarm_react, ...) is wired.",
            )
            transcript().info(
                {
                    "type": "wiring",
                    "member": member,
                    "missing": piece,
                    "done": done.format(channels=channels),
                    "fix": fix,
                },
                source=EVIDENCE_SOURCE,
            )

    def model_call(self, member: str, event: ModelEvent) -> None:
        """A completed model call of the member (from the transcript tap): checked for what
        the member was shown, and counted only as far as the wiring checks need it, which
        warn once the member misses a piece."""
        if self._exposure is not None and event.output.choices and self._exposure.automatic(member):
            self._exposed(member, event.input, event=event.uuid, replay=event.cache == "read")
        comm = self._members[member]
        if comm.own_calls >= 2 and comm.calls >= 1:
            return
        comm.calls += 1
        if current_agent_span_id() == self.own_loop(member):
            comm.own_calls += 1
        self._warn_wiring(member)

    def record_exposure(self, member: str, messages: Sequence[ChatMessage]) -> list[str]:
        """Check what the member's calling loop was shown against input messages the
        experiment saw reach its model; the records found."""
        if self._exposure is None:
            return []
        return self._exposed(member, messages, event=None, replay=False)

    def _exposed(
        self,
        member: str,
        messages: Sequence[ChatMessage],
        *,
        event: str | None,
        replay: bool,
    ) -> list[str]:
        assert self._exposure is not None
        loop = current_agent_span_id()
        caller = Caller(member, loop, loop == self.own_loop(member), current_span_id())
        found = self._exposure.check(member, loop, messages)
        for claim in found:
            self._evidence(
                "exposed", claim.channel, caller, **claim.link, record=claim.record,
                event=event, replay=replay, observed="model_event" if event else "manual",
            )  # fmt: skip
        return [c.record for c in found if c.record is not None]


def _wait_result(
    outcome: WaitOutcome, lines: list[str], ended: list[tuple[str, str | None]], limit: float
) -> str:
    if outcome == "news":
        parts = ["Wait ended: there is news.", *lines]
        if ended:
            parts.append(
                "Members ended: " + ", ".join(f"{m} ({s or 'unknown'})" for m, s in ended) + "."
            )
        return "\n".join(parts)
    return {
        "all_waiting": (
            "Wait ended: every member is waiting, has ended or has not started, so nothing "
            "will change until someone acts."
        ),
        "stopping": "Wait ended: the swarm is stopping.",
        "member_ending": "Wait ended: your agent has finished.",
        "timeout": f"Wait ended: no news after {_seconds(limit)} seconds.",
    }[outcome]


def _seconds(value: float) -> str:
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:g}"
