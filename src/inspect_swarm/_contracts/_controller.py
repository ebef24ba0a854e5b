from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, ParamSpec, overload

from ._control import SwarmControl
from ._factory import registered_factory
from ._roster import MemberInfo
from ._status import TOPOLOGY_REASONS, ControllerReason, PolicyReason, SwarmStopReason

P = ParamSpec("P")

StopReason = str
"""Why a controller's `run` returned: a topology reason such as `all_done`, or the controller's
own, recorded as `controller:<reason>`."""

FinalName = Literal["first", "last"]
"""The rule that picks the swarm's answer among the submissions: `first` takes the earliest,
`last` the latest. Of two submissions at the same moment, the one from the member earlier in the
roster counts as first."""


class Controller:
    """The policy that runs a swarm: which members start, when, on what input, and when it is over.

    The object is configuration only and every sample shares it, so whatever belongs to one
    sample lives in local variables of `run`. Build it in a factory decorated with
    `@swarm_controller`.
    """

    def __init__(
        self,
        run: Callable[["SwarmControl"], Awaitable[StopReason]],
        *,
        final: FinalName | None = None,
        check: Callable[[Sequence[MemberInfo]], None] | None = None,
        instructions: str | None = None,
        needs_work: bool = False,
        policy: bool = False,
    ) -> None:
        """Create a controller.

        Args:
            run: Called once per sample. Starts members and waits for their events through the
                `SwarmControl`, and returns the stop reason. Returning requests the stop.
            final: The rule that picks the answer among the submissions, for the provisional
                answer as for the final one: `first` takes the earliest submission, `last` the
                latest, and `None` means `first`. An answer that `run` names with
                `SwarmControl.choose_answer()` takes precedence over the rule.
            check: Runs on the roster as `swarm()` builds the swarm, and raises `ValueError`
                when the controller cannot run that roster.
            instructions: What each member's preamble says of how the swarm works together.
                `None` says that each member works on its own and that the first submission
                may end the work.
            needs_work: `run` starts members on the work the channels give them
                (`SwarmControl.assigned()`), so `swarm()` refuses a swarm none of whose
                channels hands out work (`Channel.hands_out_work`).
            policy: The controller is an activation policy: every member starts at once and
                waits for the policy to activate it (`SwarmControl.scheduled()`), and the
                stop reason `run` returns is recorded as `policy:<reason>`.

        Raises:
            ValueError: `final` is not `"first"`, `"last"` or `None`.
        """
        if final not in (None, "first", "last"):
            raise ValueError(
                f"Controller(final=...): final={final!r} is not an answer rule. "
                'Use "first", "last" or None.'
            )
        self.run = run
        """The controller's body, awaited once per sample with the swarm's `SwarmControl`."""
        self.final: FinalName = final or "first"
        """The answer rule, `first` or `last` (`first` when none was given)."""
        self.check = check
        """The roster check `swarm()` runs when it builds the swarm, or `None`."""
        self.instructions = instructions
        """What each member's preamble says of how the swarm works together, or `None`."""
        self.needs_work = needs_work
        """Whether `swarm()` requires a channel that hands out work."""
        self.policy = policy
        """Whether the controller activates members turn by turn (an activation policy)."""


def recorded_stop_reason(reason: StopReason, *, policy: bool = False) -> SwarmStopReason:
    """The stop reason as the ledger records it."""
    if reason in TOPOLOGY_REASONS:
        return TOPOLOGY_REASONS[reason]
    return PolicyReason(f"policy:{reason}") if policy else ControllerReason(f"controller:{reason}")


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

    The controller keeps the arguments its factory was called with: the log shows them, and the
    controller can be built again from the log. Inside a package, the factory's registered name
    is `<package>/<name>`.

    Args:
        func: A function returning a `Controller`.
        name: The registered name, in place of the function's name.

    Returns:
        The registered factory.
    """
    return registered_factory("swarm_controller", func, name)
