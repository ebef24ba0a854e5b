from dataclasses import dataclass
from typing import Literal

MemberState = Literal["pending", "running", "ended"]
"""A member's lifecycle: not started, running, or ended."""

Delivery = Literal["notify", "poll"]


@dataclass(frozen=True)
class MemberInfo:
    """A member as the controller's `check` and a channel's `instructions()` see it."""

    name: str
    """The member's name."""

    role: str | None = None
    """The member's role, if it has one."""
