"""The `verified()` controller: every member starts at once; the first submission that passes a
check ends the swarm and is its answer."""

from inspect_ai.scorer import Scorer

from .._contracts._controller import Controller, FinalName, swarm_controller
from ._stops import run_until, verified_condition


@swarm_controller
def verified(check: Scorer | None = None, *, final: FinalName | None = None) -> Controller:
    """Start every member; stop at the first submission that passes a check.

    Each member's submission is checked when the member ends, with the task's first scorer or
    `check`, outside the member and with its sandbox as the default. The first that passes
    becomes the swarm's answer (the result record gives the mode `controller`), and the swarm
    stops with the reason `verified`. A submission that fails ends only its member; the others
    go on. The checks count in each member's `gate_checks`, `gate_passes` and
    `first_pass_time`, so the passing member's `first_pass_time` is when the swarm began to
    stop.

    When no submission passes, the swarm ends with `all_done` once every member has ended, and
    its answer follows `final`. Use `leaderless(stop=any_of(verified_pass(), stall(40)))` to
    combine the check with other stops.

    Args:
        check: The scorer that checks a submission. `None` uses the task's first scorer. A
            score of 1.0 (under Inspect's `value_to_float()`) passes.
        final: The answer rule when no submission passes: `first` (the default, for `None`)
            or `last`.
    """
    return run_until(
        verified_condition(check, "verified"),
        final,
        "Each member works on its own; the first answer submitted that passes the task's "
        "check ends the work.",
    )
