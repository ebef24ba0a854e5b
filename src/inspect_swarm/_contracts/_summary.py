"""What a swarm did, in words and one table: a projection of its three records, and the words
that say how a member ended and why the swarm stopped.

The viewer's summary event, the console's warning and `inspect-swarm show` all read the same
`SwarmSummary`, built from the records as they are in the store, so the three say the same.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias

from inspect_ai.model import ModelUsage
from inspect_ai.util._limit import TokenLimit, _TokenMetering, parse_token_limit

from ._budget import format_cost, split_shares, token_noun

ReachKind: TypeAlias = Literal["cost", "tokens", "time"]
_SPLIT: tuple[Literal["cost", "tokens"], ...] = ("cost", "tokens")

_ANSWER_CHARS = 120

TABLE_HEADER = (
    "member", "status", "time", "steps", "tokens", "cost", "submissions", "sent", "read", "waits",
)  # fmt: skip
"""The columns of the members table, in order."""


@dataclass(frozen=True)
class Reach:
    """A cap the swarm reached, or a share a member reached."""

    rule: Literal["cap", "share"]
    kind: ReachKind
    limit: float
    used: float
    member: str | None
    """The member whose call reached the cap, or whose share it is."""
    token_type: str = "all"

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "words": self.words()}

    def short(self) -> str:
        """The reach in a few words: `token cap`, `react-3 cost share`."""
        noun = _kind_noun(self.kind, self.token_type)
        return f"{noun} cap" if self.rule == "cap" else f"{self.member} {noun} share"

    def words(self, *, own: bool = False) -> str:
        """The reach as a clause: about the swarm, or (`own`) about the member it stopped."""
        noun = _kind_noun(self.kind, self.token_type)
        limit = _amount(self.kind, self.limit, self.token_type)
        used = _amount(self.kind, self.used, self.token_type)
        if self.rule == "share":
            who = "" if own else f"{self.member} "
            return f"{who}reached its {noun} share ({limit}): {used} used"
        if self.kind == "time":
            return f"the swarm's time cap ({limit}) passed"
        if own:
            return f"its call reached the swarm's {noun} cap ({limit}): {used} used"
        by = f" by {self.member}'s call" if self.member else ""
        return f"the swarm's {noun} cap ({limit}) was reached{by}: {used} used"


def _kind_noun(kind: ReachKind, token_type: str) -> str:
    if kind != "tokens":
        return kind
    return "token" if token_type == "all" else f"{token_noun(token_type).removesuffix('s')}"


def _amount(kind: ReachKind, value: float, token_type: str) -> str:
    if kind == "cost":
        return format_cost(value)
    if kind == "time":
        return f"{value:,.0f} s" if value >= 10 else f"{value:g} s"
    return f"{value:,.0f}"


def _seconds(value: float) -> str:
    return f"{value:g} s"


def seconds(value: float) -> str:
    """A time the swarm measured, always to the hundredth: `1.63 s`, `0.70 s`."""
    return f"{value:.2f} s"


def quote_answer(text: str) -> str:
    """An answer on one line, cut to a length a table or a sentence can hold."""
    line = " ".join(text.split())
    return line if len(line) <= _ANSWER_CHARS else line[: _ANSWER_CHARS - 1] + "…"


def stop_words(
    reason: str | None,
    ended_by: str | None,
    *,
    first: str | None = None,
    cap: Reach | None = None,
    errored: str | None = None,
) -> str:
    """Why the swarm stopped, as a clause: its own stop (`reason`), else what ended it from
    outside (`ended_by`), else the member whose error ended it (`errored`)."""
    if reason is None and ended_by is None and errored is not None:
        return f"{errored} errored, which ended the swarm"
    if reason is None:
        return _ended_by_words(ended_by)
    if reason == "submitted":
        return f"{first} submitted first" if first else "a member submitted"
    if reason == "all_done":
        return "every member had ended"
    if reason in ("swarm_cap", "swarm_time") and cap is not None:
        return cap.words()
    if reason == "swarm_cap":
        return "the swarm reached a cap"
    if reason == "swarm_time":
        return "the swarm's time cap passed"
    if reason.startswith("policy:"):
        return f"its activation policy stopped it: {reason.removeprefix('policy:')}"
    own = reason.removeprefix("controller:")
    return (
        f"its controller stopped it: {own}"
        if own != reason
        else f"its controller stopped it ({reason})"
    )


def _ended_by_words(ended_by: str | None) -> str:
    if ended_by is None:
        return "an error ended the swarm"
    if ended_by.startswith("sample_limit:"):
        return f"the sample's {ended_by.removeprefix('sample_limit:')} limit was reached"
    if ended_by == "operator":
        return "an operator interrupted the sample"
    return "the swarm was cancelled from outside"


@dataclass(frozen=True)
class MemberEnd:
    """What the words on a member's end need to know."""

    status: str | None
    answer: str | None = None
    """Its submission's text, for a member that submitted."""
    stop: str | None = None
    """Why the swarm stopped (`stop_words()`), once its stop has begun."""
    grace: float | None = None
    reach: Reach | None = None
    """The cap or share that stopped it."""
    detail: str | None = None
    """The error, the limit, the model's stop reason or what cancelled it from outside."""
    after_grace: bool = False
    """The swarm cancelled it when the grace period ran out."""


def ending_words(end: MemberEnd) -> str:
    """How a member ended, as a sentence about it: `submitted 1024`, `stopped by the swarm:
    react-3 submitted first (grace 120 s)`, `reached its token share (10,000): 10,120 used`."""
    status = end.status
    grace = f" (grace {_seconds(end.grace)})" if end.grace is not None else ""
    if status is None:
        return "never started"
    if status == "submitted":
        return (
            f"submitted {quote_answer(end.answer)}" if end.answer else "submitted an empty answer"
        )
    if status == "unsubmitted":
        because = f" (the model stopped: {end.detail})" if end.detail else ""
        return f"ended without submitting{because}"
    if status == "stopped":
        return f"stopped by the swarm: {end.stop or 'its stop began'}{grace}"
    if status == "cancelled" and end.after_grace:
        period = f" ({_seconds(end.grace)})" if end.grace is not None else ""
        return f"cancelled after the grace period{period}: {end.stop or 'the swarm stopped'}"
    if status == "cancelled":
        return f"cancelled: {end.detail or 'from outside the swarm'}"
    if status in ("share", "swarm_cap"):
        if end.reach is not None:
            return end.reach.words(own=True)
        return "reached its share" if status == "share" else "its call reached a swarm cap"
    if status.startswith("member_limit:"):
        limit = status.removeprefix("member_limit:")
        return f"reached its own {limit} limit" + (f" ({end.detail})" if end.detail else "")
    if status == "errored":
        return f"errored: {end.detail}" if end.detail else "errored"
    return status


@dataclass(frozen=True)
class MemberRow:
    """One member in the summary's table."""

    name: str
    role: str | None
    status: str | None
    time: float | None
    steps: int
    tokens: int
    cost: float
    submissions: int
    sent: int | None
    """Records its channels delivered (messages, board writes); `None` without a channel
    that records."""
    read: int | None
    waits: int | None


@dataclass(frozen=True)
class SwarmSummary:
    """What one swarm did: its answer, why it stopped, what it reached, and each member."""

    answer: str | None
    """The answer's text (`None` with no submission)."""
    member: str | None
    mode: str | None
    reason: str | None
    provisional: bool
    stop_reason: str | None
    ended_by: str | None
    stop: str
    """Why the swarm stopped, in words."""
    grace: float
    reached: tuple[Reach, ...]
    """Every cap the swarm reached and every share a member reached."""
    stopped_by: Reach | None
    """The cap that stopped the swarm, if one did."""
    tokens: int
    cost: float
    wall_clock: float
    complete: bool
    members: tuple[MemberRow, ...]
    tools_unwired: tuple[str, ...] = ()
    """Members that made model calls without the channels' tools (`swarm_tools()`)."""
    notify_unwired: tuple[str, ...] = ()
    """`notify` members whose own loop went on without the notices (`swarm_on_continue()`)."""

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["reached"] = [r.as_json() for r in self.reached]
        data["stopped_by"] = None if self.stopped_by is None else self.stopped_by.as_json()
        return data

    def answer_words(self) -> str:
        if self.member is None:
            return "none: no member submitted"
        text = f"`{_code(quote_answer(self.answer))}`" if self.answer else "an empty answer"
        how = {
            "first": "the first submission",
            "last": "the last submission",
            "controller": "chosen by the controller",
        }.get(self.mode or "", str(self.mode))
        why = f": {self.reason}" if self.mode == "controller" and self.reason else ""
        later = " (provisional: the sample ended before the swarm finished)"
        return f"{text} from {self.member} ({how}{why}){later if self.provisional else ''}"

    def also_reached(self) -> list[Reach]:
        """The caps and shares reached, but the cap the stop already names."""
        return [r for r in self.reached if r is not self.stopped_by]

    def stop_sentence(self) -> str:
        text = self.stop
        if self.stop_reason is not None and self.ended_by is not None:
            text += f"; then {_ended_by_words(self.ended_by)}"
        return text

    def unwired_words(self) -> str:
        """The members that missed the channels' tools or notices, in words (empty if none)."""
        parts = []
        if self.tools_unwired:
            parts.append(f"{', '.join(self.tools_unwired)} got no channel tools (swarm_tools())")
        if self.notify_unwired:
            names = ", ".join(self.notify_unwired)
            parts.append(f"{names} got no notices (swarm_on_continue())")
        return "; ".join(parts)

    def spent_words(self) -> str:
        bound = "" if self.complete else " (at least: some calls' usage is unknown)"
        n = len(self.members)
        return (
            f"{self.tokens:,} tokens, {format_cost(self.cost)}, {seconds(self.wall_clock)}, "
            f"{n} member{'s' if n != 1 else ''}{bound}"
        )


def token_type_of(budget: dict[str, Any], sample_token_type: str | None) -> str:
    """What the token cap meters: the budget's own type, else the sample limit's it derives from."""
    tokens = budget.get("tokens")
    if isinstance(tokens, str):
        parsed = parse_token_limit(tokens)
        if isinstance(parsed, TokenLimit):
            return parsed.type
        return "all"
    if tokens is None and sample_token_type:
        return sample_token_type
    return "all"


def summarize(
    result: dict[str, Any],
    ledger: dict[str, Any],
    metrics: dict[str, Any],
    *,
    answer: str | None,
    token_type: str = "all",
) -> SwarmSummary:
    """The summary of one swarm from its result, ledger and metrics records (as stored)."""
    final = result["final"]
    members = result["members"]
    reached = _reached(ledger, members, metrics, token_type)
    stopped_by = _stopped_by(ledger["stop_reason"], reached)
    first = _first_submitter(final, members)
    errored = next((m["name"] for m in members if m["status"] == "errored"), None)
    return SwarmSummary(
        answer=answer if final["member"] is not None else None,
        member=final["member"],
        mode=final["mode"],
        reason=final["reason"],
        provisional=bool(final["provisional"]),
        stop_reason=ledger["stop_reason"],
        ended_by=ledger["ended_by"],
        stop=stop_words(
            ledger["stop_reason"], ledger["ended_by"], first=first, cap=stopped_by, errored=errored
        ),
        grace=float(ledger["budget"]["grace"]),
        reached=tuple(reached),
        stopped_by=stopped_by,
        tokens=int(metrics["tokens"]),
        cost=float(metrics["cost"]),
        wall_clock=float(metrics["wall_clock"]),
        complete=bool(ledger["total_complete"]),
        members=tuple(_row(entry, m) for entry, m in zip(members, metrics["members"], strict=True)),
        tools_unwired=tuple(metrics["tools_unwired"]),
        notify_unwired=tuple(metrics["notify_unwired"]),
    )


def _stopped_by(reason: str | None, reached: list[Reach]) -> Reach | None:
    if reason == "swarm_time":
        return next((r for r in reached if r.kind == "time"), None)
    if reason == "swarm_cap":
        return next((r for r in reached if r.rule == "cap" and r.kind != "time"), None)
    return None


def _first_submitter(final: dict[str, Any], members: list[dict[str, Any]]) -> str | None:
    if final["mode"] == "first" and final["member"] is not None:
        return str(final["member"])
    submitted = [m for m in members if m["submitted"] and m["time"] is not None]
    return min(submitted, key=lambda m: m["time"])["name"] if submitted else None


def _row(entry: dict[str, Any], m: dict[str, Any]) -> MemberRow:
    comm = m["comm"] or {}
    recorded = bool(comm)
    return MemberRow(
        name=entry["name"],
        role=entry["role"],
        status=entry["status"],
        time=m["running_time"],
        steps=int(m["steps"]),
        tokens=int(m["tokens"]),
        cost=float(m["cost"]),
        submissions=int(m["submissions"]),
        sent=sum(c["records"] for c in comm.values()) if recorded else None,
        read=sum(c["reads"] for c in comm.values()) if recorded else None,
        waits=m["waits"],
    )


def _reached(
    ledger: dict[str, Any],
    members: list[dict[str, Any]],
    metrics: dict[str, Any],
    token_type: str,
) -> list[Reach]:
    """The caps the swarm reached (the one that stopped it first), then the shares members
    reached, in roster order."""
    caps = ledger["caps"]
    metering = _TokenMetering(token_type)
    swarm_used: dict[ReachKind, float] = {
        "cost": float(ledger["swarm"]["cost"]),
        "tokens": metering.value(ModelUsage(**ledger["swarm"]["usage"])),
        "time": float(metrics["wall_clock"]),
    }
    capped = [m for m in members if m["status"] == "swarm_cap" and m["time"] is not None]
    # the first member stopped at a cap is the one whose call reached it
    by_cap = min(capped, key=lambda m: m["time"])["name"] if capped else None
    reached: list[Reach] = []
    for kind in _SPLIT:
        cap = caps.get(kind)
        if cap is not None and swarm_used[kind] >= cap:
            reached.append(Reach("cap", kind, cap, swarm_used[kind], by_cap, token_type))
    if ledger["stop_reason"] == "swarm_time" and caps.get("time") is not None:
        reached.append(Reach("cap", "time", caps["time"], swarm_used["time"], None, token_type))
    split = ledger["budget"]["split"]
    for index, (entry, own) in enumerate(zip(members, ledger["members"], strict=True)):
        if entry["status"] != "share":
            continue
        own_used: dict[ReachKind, float] = {
            "cost": float(own["meter"]["cost"]),
            "tokens": metering.value(ModelUsage(**own["meter"]["usage"])),
        }
        for kind in _SPLIT:
            cap = caps.get(kind)
            shares = split_shares(_cap_value(cap), _split(split), len(members)) if cap else None
            if shares is not None and own_used[kind] >= shares[index]:
                reached.append(
                    Reach("share", kind, shares[index], own_used[kind], entry["name"], token_type)
                )
                break
    return reached


def _cap_value(cap: float) -> float:
    # a token cap is whole tokens: its shares are too (split_shares tells them by type)
    return int(cap) if float(cap).is_integer() else cap


def _split(split: Any) -> Any:
    return tuple(split) if isinstance(split, list) else split


def _code(text: str) -> str:
    return text.replace("`", "'")


def summary_markdown(s: SwarmSummary) -> str:
    """The summary as Markdown, for the viewer."""
    lines = [
        f"**Swarm answer**: {s.answer_words()}",
        "",
        f"**Stopped**: {s.stop_sentence()}",
        "",
    ]
    also = s.also_reached()
    if also:
        lines += ["**Caps and shares reached**: " + "; ".join(r.words() for r in also), ""]
    if s.unwired_words():
        lines += [f"**Unwired**: {s.unwired_words()}", ""]
    lines += [f"**Spent**: {s.spent_words()}", ""]
    # an indented code block: monospace, so the columns line up
    lines += [f"    {line}" for line in members_text(s.members).splitlines()]
    return "\n".join(lines)


def members_text(rows: Sequence[MemberRow]) -> str:
    """The members table as aligned plain text (numbers to the right), one member a line."""
    cells = [list(TABLE_HEADER), *(row_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(TABLE_HEADER))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    )


def row_cells(row: MemberRow) -> list[str]:
    """A member's row as text cells, in the table's column order."""
    name = row.name if row.role is None else f"{row.name} ({row.role})"

    def count(value: int | None) -> str:
        return "–" if value is None else f"{value:,}"

    return [
        name,
        row.status or "never started",
        "–" if row.time is None else seconds(row.time),
        f"{row.steps:,}",
        f"{row.tokens:,}",
        format_cost(row.cost),
        f"{row.submissions:,}",
        count(row.sent),
        count(row.read),
        count(row.waits),
    ]
