"""The typed values the swarm records: how a member ended, why the swarm stopped, what ended it.

Each is a `Literal` (or a `NewType` for the one open-ended value), so mypy checks every place
that produces or compares one. The strings are the wire values of the records and events.
"""

from typing import Any, Literal, NewType, TypeAlias, get_args

LimitType: TypeAlias = Literal[
    "message", "time", "working", "token", "turn", "cost", "operator", "custom"
]
"""The type of an Inspect limit (`LimitExceededError.type`)."""

MemberLimitStatus: TypeAlias = Literal[
    "member_limit:message",
    "member_limit:time",
    "member_limit:working",
    "member_limit:token",
    "member_limit:turn",
    "member_limit:cost",
    "member_limit:operator",
    "member_limit:custom",
]
"""A member ended by one of its own limits."""


def _by_limit(prefix: str, statuses: Any) -> dict[Any, Any]:
    """Each limit type's status, `<prefix>:<type>`, from the status `Literal`'s values."""
    table = dict(zip(get_args(LimitType), get_args(statuses), strict=True))
    assert all(status == f"{prefix}:{limit}" for limit, status in table.items())
    return table


_MEMBER_LIMITS: dict[LimitType, MemberLimitStatus] = _by_limit("member_limit", MemberLimitStatus)


def member_limit(limit: LimitType) -> MemberLimitStatus:
    """The status of a member that reached its own limit of this type."""
    return _MEMBER_LIMITS[limit]


StopCause: TypeAlias = Literal["stopped", "swarm_cap", "share"] | MemberLimitStatus
"""How the swarm ended a member, rather than its agent: the swarm's stop, a cap, the member's
share, or (for a member the swarm meters) one of its own limits."""

MemberStatus: TypeAlias = Literal["submitted", "unsubmitted", "cancelled", "errored"] | StopCause
"""How a member ended (`MemberHandle.status`)."""

TopologyReason: TypeAlias = Literal["all_done", "submitted", "verified", "quiescence"]
"""A controller's stop reason that the ledger records as it is."""

TOPOLOGY_REASONS: dict[str, TopologyReason] = {
    "all_done": "all_done",
    "submitted": "submitted",
    "verified": "verified",
    "quiescence": "quiescence",
}

ControllerReason = NewType("ControllerReason", str)
"""A controller's own stop reason as the ledger records it, `controller:<reason>`."""

PolicyReason = NewType("PolicyReason", str)
"""An activation policy's own stop reason as the ledger records it, `policy:<reason>`."""

SwarmStopReason: TypeAlias = (
    Literal["swarm_cap", "swarm_time"] | TopologyReason | ControllerReason | PolicyReason
)
"""Why the swarm stopped its members (the ledger's `stop_reason`): a cap, or its controller."""

SampleLimitEnd: TypeAlias = Literal[
    "sample_limit:message",
    "sample_limit:time",
    "sample_limit:working",
    "sample_limit:token",
    "sample_limit:turn",
    "sample_limit:cost",
    "sample_limit:operator",
    "sample_limit:custom",
]

_SAMPLE_LIMITS: dict[LimitType, SampleLimitEnd] = _by_limit("sample_limit", SampleLimitEnd)


def sample_limit(limit: LimitType) -> SampleLimitEnd:
    """What the ledger's `ended_by` says of a sample limit of this type."""
    return _SAMPLE_LIMITS[limit]


EndedBy: TypeAlias = Literal["operator", "unknown"] | SampleLimitEnd
"""What from outside ended the swarm (the ledger's `ended_by`)."""

Verdict: TypeAlias = Literal["swarm_cap", "share"]
"""The rule a charged call reached: one of the swarm's caps, or the member's share."""

WaitOutcome: TypeAlias = Literal[
    "news", "all_waiting", "stopping", "member_ending", "timeout", "cancelled"
]
"""What ended a `swarm_wait` (its `waited` evidence)."""
