"""The `comm` evidence events, built at a fraction of what `transcript().info()` costs.

`transcript().info()` validates the data as JSON and draws a shortuuid (a `uuid4` from the
system's random source, turned into base 57 in Python) for every event. The bus logs one or
two events per board operation, with data it builds itself as plain JSON, so it copies a
template event instead, and numbers the events of a run after a random prefix. The event is
otherwise the one `transcript().info()` makes: the same fields, filled by the model's own
default factories, in the current span.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from secrets import token_urlsafe
from typing import Any, cast

from inspect_ai.event import InfoEvent
from inspect_ai.log import transcript
from inspect_ai.util._span import current_span_id
from pydantic import JsonValue

from ..._contracts._schema import EVIDENCE_SOURCE

_TEMPLATE = InfoEvent(source=EVIDENCE_SOURCE, data=None)


def _factory(field: str) -> Callable[[], Any]:
    factory = InfoEvent.model_fields[field].default_factory
    assert factory is not None, f"InfoEvent.{field} has no default factory"
    return cast(Callable[[], Any], factory)


_timestamp = _factory("timestamp")
_working_start = _factory("working_start")


class EvidenceLog:
    """The evidence events of one run of the swarm."""

    def __init__(self) -> None:
        # event ids: 96 random bits for the run, then a count, so no two events share one
        self._prefix = token_urlsafe(12)
        self._numbers = itertools.count(1)

    def log(self, data: dict[str, JsonValue]) -> None:
        """Add an InfoEvent with source `inspect_swarm` and `data` to the transcript.

        `data` must be plain JSON that nothing changes afterwards: it goes into the event
        without a copy.
        """
        event = _TEMPLATE.model_copy(
            update={
                "uuid": f"{self._prefix}{next(self._numbers)}",
                "span_id": current_span_id(),
                "timestamp": _timestamp(),
                "working_start": _working_start(),
                "data": data,
            }
        )
        transcript()._event(event)
