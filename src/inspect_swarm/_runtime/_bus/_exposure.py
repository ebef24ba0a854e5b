"""Exposure: whether what a member was shown (a record it read, a notice) reached the input of a
successful model call of the same conversation, and how complete that observation was."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from inspect_ai.model import ChatMessage
from pydantic import JsonValue

Coverage = Literal["complete", "failed", "none"]
"""How far a member's model inputs were observed: each successful call checked (`complete`),
some that could not be (`failed`), or none observed (`none`)."""


@dataclass(frozen=True)
class Claim:
    """Something a conversation was shown, waiting to be found in one of its model inputs."""

    channel: str
    link: dict[str, JsonValue]
    """What the exposure confirms: `{"read": "r-3"}` or `{"notice": "n-2"}`."""
    record: str | None
    text: str


class ExposureWatch:
    """The claims of each member's conversations, and each member's coverage. The model calls
    of a `manual` member are only counted: its experiment observes them (`check()` through
    `record_exposure()`), and its coverage is complete when it observed as many."""

    def __init__(self, manual: Collection[str] = ()) -> None:
        self._manual = frozenset(manual)
        self._claims: dict[tuple[str, str | None], list[Claim]] = {}
        self._checked: Counter[str] = Counter()
        self._failed: Counter[str] = Counter()
        self._calls: Counter[str] = Counter()

    def claim(self, member: str, loop: str | None, claim: Claim) -> None:
        if claim.text:
            self._claims.setdefault((member, loop), []).append(claim)

    def automatic(self, member: str) -> bool:
        """Count a successful model call of the member; whether the swarm checks it."""
        self._calls[member] += 1
        return member not in self._manual

    def check(
        self, member: str, loop: str | None, messages: Sequence[ChatMessage] | None
    ) -> list[Claim]:
        """The claims of the conversation that these input messages hold; `None` for an
        input that could not be read, which makes the member's coverage `failed`."""
        if not messages:
            self._failed[member] += 1
            return []
        self._checked[member] += 1
        pending = self._claims.get((member, loop))
        if not pending:
            return []
        text = "\n".join(m.text for m in messages)
        found = [c for c in pending if c.text in text]
        if found:
            pending[:] = [c for c in pending if c not in found]
        return found

    def coverage(self, member: str) -> Coverage:
        checked = self._checked[member]
        unobserved = member in self._manual and checked < self._calls[member]
        if self._failed[member] or (checked and unobserved):
            return "failed"
        return "complete" if checked else "none"
