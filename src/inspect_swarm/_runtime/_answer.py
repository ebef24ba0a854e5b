"""The answer rules: which member's submission is the swarm's answer, and which answers agree."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._contracts._controller import FinalName
from ._member_run import MemberRun


@dataclass(frozen=True)
class Answer:
    """Which member's submission is the swarm's answer, and by which rule."""

    mode: Literal["first", "last", "controller"] | None
    member: MemberRun | None
    reason: str | None

    def record(self, provisional: bool) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "member": None if self.member is None else self.member.name,
            "reason": self.reason,
            "provisional": provisional,
        }


NO_SUBMISSIONS = Answer(mode=None, member=None, reason="no_submissions")


def choose_answer(
    members: Sequence[MemberRun], rule: FinalName, chosen: tuple[MemberRun, str | None] | None
) -> Answer:
    """The controller's choice, else the earliest (or latest) submission; ties by roster order."""
    if chosen is not None:
        return Answer(mode="controller", member=chosen[0], reason=chosen[1])
    submitted = [m for m in members if m.submitted and m.submit_time is not None]
    if not submitted:
        return NO_SUBMISSIONS
    if rule == "first":
        best = min(submitted, key=lambda m: (m.submit_time, m.spec.index))
    else:
        latest = max(m.submit_time or 0.0 for m in submitted)
        best = min((m for m in submitted if m.submit_time == latest), key=lambda m: m.spec.index)
    return Answer(mode=rule, member=best, reason=None)


def agreement(members: Sequence[MemberRun]) -> list[list[MemberRun]]:
    """The members with a submission, grouped by equal answers: each group by submission
    time, the groups by their first submission."""
    submitted = sorted(
        (m for m in members if m.submitted and m.submit_time is not None),
        key=lambda m: (m.submit_time, m.spec.index),
    )
    groups: dict[str, list[MemberRun]] = {}
    for m in submitted:
        groups.setdefault(_same_answer(m), []).append(m)
    return list(groups.values())


def _same_answer(m: MemberRun) -> str:
    """What two equal answers share: the text without case, with whitespace runs as one space."""
    text = m.output.completion if m.output is not None else ""
    return " ".join(text.split()).casefold()
