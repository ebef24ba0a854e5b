"""How the swarm stops a member and refuses starts after its stop, and how to read the
exceptions a stop leaves."""

from collections.abc import Iterator

import anyio
from inspect_ai.util import LimitExceededError

from .._contracts._status import StopCause


class MemberStop(LimitExceededError):
    """Raised in a member's task to end it at a model call the swarm refuses.

    It is a `LimitExceededError` so that inspect's hooks propagate it and agents treat it as
    the end of their run; its `source` is the member's own stop token, which no limit scope
    and no other member recognises.
    """

    def __init__(self, member: str, cause: StopCause, token: object) -> None:
        super().__init__(
            "custom",
            value=0,
            limit=0,
            message=f"The swarm ended member {member} ({cause}).",
            source=token,  # type: ignore[arg-type]
        )
        self.member = member
        self.cause = cause


class SwarmStoppingError(RuntimeError):
    """A controller started a member after the swarm's stop began."""


def leaves(ex: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(ex, BaseExceptionGroup):
        for inner in ex.exceptions:
            yield from leaves(inner)
    else:
        yield ex


def is_cancellation(ex: BaseException) -> bool:
    return isinstance(ex, anyio.get_cancelled_exc_class())
