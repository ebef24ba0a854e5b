from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, ParamSpec, overload

from ._control import SwarmControl
from ._factory import registered_factory
from ._roster import MemberInfo
from ._status import TOPOLOGY_REASONS, ControllerReason, SwarmStopReason

P = ParamSpec("P")

StopReason = str
"""Why a controller's `run` returned: a topology reason such as `all_done`, or the controller's
own, recorded as `controller:<reason>`."""

FinalName = Literal["first", "last"]
"""How the swarm chooses its answer from the submissions: `first`, the earliest, or `last`, the
latest. A tie goes to the member listed first in the roster."""


class Controller:
    """How a swarm runs: which members start, when and with what input, and when the swarm is done.

    A `Controller` holds configuration only: one object serves every sample, so per-sample state
    belongs in `run`'s local variables. Return one from a factory decorated with
    `@swarm_controller`.
    """

    def __init__(
        self,
        run: Callable[["SwarmControl"], Awaitable[StopReason]],
        *,
        final: FinalName | None = None,
        check: Callable[[Sequence[MemberInfo]], None] | None = None,
        instructions: str | None = None,
    ) -> None:
        """Create a controller.

        Args:
            run: Called once per sample. Starts members and waits for their events through the
                `SwarmControl`, and returns the stop reason. Returning requests the stop.
            final: How the swarm chooses its answer from the submissions, for the provisional
                answer and when the swarm ends: `first`, the earliest submission, or `last`,
                the latest. `None` is the default, `first`. When `run` names the answer with
                `SwarmControl.choose_answer()`, that choice is the answer instead.
            check: Called with the roster when the swarm is built. Raise `ValueError` for a
                roster the controller cannot run.
            instructions: What each member's preamble says of how the swarm works together.
                `None` says that each member works on its own and that the first submission
                may end the work.
        """
        if final not in (None, "first", "last"):
            raise ValueError(
                f"Controller(final=...): final={final!r} is not an answer rule. "
                'Use "first", "last" or None.'
            )
        self.run = run
        self.final: FinalName = final or "first"
        self.check = check
        self.instructions = instructions


def recorded_stop_reason(reason: StopReason) -> SwarmStopReason:
    """The stop reason as the ledger records it."""
    return TOPOLOGY_REASONS.get(reason) or ControllerReason(f"controller:{reason}")


@overload
def swarm_controller(func: Callable[P, Controller], /) -> Callable[P, Controller]: ...


@overload
def swarm_controller(
    *, name: str | None = None
) -> Callable[[Callable[P, Controller]], Callable[P, Controller]]: ...


def swarm_controller(
    func: Callable[P, Controller] | None = None, /, *, name: str | None = None
) -> Callable[P, Controller] | Callable[[Callable[P, Controller]], Callable[P, Controller]]:
    """Decorator for registering swarm controllers.

    The factory's arguments are recorded with the controller, so they appear in the log and the
    controller can be rebuilt from it. A factory in a package is registered as
    `<package>/<name>`.

    Args:
        func: A function returning a `Controller`.
        name: The registered name, in place of the function's name.
    """
    return registered_factory("swarm_controller", func, name)
