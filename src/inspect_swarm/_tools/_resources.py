"""What a member can ask of the swarm's budget: `swarm_budget()` and the `swarm_resources()`
tool."""

from collections.abc import Callable

from inspect_ai.tool import Tool, ToolError, tool

from .._context import current_member, current_swarm
from .._contracts._budget import BudgetUsage, SwarmBudget, format_cost, token_noun


def swarm_budget() -> SwarmBudget:
    """The budget of the swarm the caller runs in.

    For each kind of cap, the cap and what all members together have used of it; when a member
    calls it under a split budget, also that member's share and its use of it. These are the
    caps that stop the swarm. `sample_limits()` cannot show them, since the swarm keeps back part
    of every sample limit.

    Returns:
        How the budget is split, and a `BudgetUsage` per kind of cap (`None` for a kind the
        swarm does not cap).

    Raises:
        RuntimeError: Called outside a swarm.
    """
    host = current_swarm()
    if host is None:
        raise RuntimeError(
            "swarm_budget() reads the budget of the swarm it is called in, and was called "
            "outside a swarm. Call it from a member's agent or tools, or from the swarm's "
            "controller."
        )
    return host.budget(current_member())


@tool
def swarm_resources() -> Tool:
    """A tool that reports the swarm's budget to the member that calls it.

    The tool lists the caps that stop the swarm, what all members have used of them, the
    calling member's share of a split budget, and the time cap. Each line opens with what remains
    (of the member's share when it has one, then of the cap), since a member plans by what
    remains. Give members this tool rather than one that reads `sample_limits()`: that one
    reports the sample's limits, not the swarm's caps.

    Returns:
        The tool, which takes no arguments.
    """

    async def execute() -> str:
        """Report the swarm's budget: what is left of its caps and of your share.

        Returns:
            For each cap, what is left of your share (when the budget is split) and of the cap,
            with the cap and what has been used.
        """
        try:
            budget = swarm_budget()
        except RuntimeError as ex:
            raise ToolError(str(ex)) from ex
        return resources_text(budget)

    return execute


def resources_text(budget: SwarmBudget) -> str:
    """The budget as the swarm_resources() tool reports it to the model."""
    lines = [
        _line("Cost", budget.cost, format_cost, ""),
        _line("Tokens", budget.tokens, _whole, f" {token_noun(budget.token_type)}"),
        _line("Time", budget.time, _whole, " seconds"),
    ]
    caps = [line for line in lines if line is not None]
    if not caps:
        return "The swarm has no caps: it stops only when the sample's own limits are reached."
    split = {"pool": "one pool shared by all members", "equal": "equal shares"}.get(
        str(budget.split), f"shares weighted {budget.split!r} in roster order"
    )
    head = f"The swarm's caps (cost and tokens are split as {split}):"
    return "\n".join([head, *caps])


def _line(
    label: str, usage: BudgetUsage | None, show: Callable[[float], str], unit: str
) -> str | None:
    """One capped kind, what is left first: it is what a member decides on. The unit is said
    with the cap ("8,900 left (cap 10,000 tokens, ...)")."""
    if usage is None:
        return None
    verb = "elapsed" if label == "Time" else "used by all members"
    left = show(max(0.0, usage.cap - usage.used))
    cap = f"cap {show(usage.cap)}{unit}, {show(usage.used)} {verb}"
    if usage.share is None:
        return f"- {label}: {left} left ({cap})."
    used = usage.share_used or 0.0
    mine = show(max(0.0, usage.share - used))
    share = f"your share {show(usage.share)}{unit}, you used {show(used)}"
    return f"- {label}: {mine} left of your share, {left} of the cap ({cap}; {share})."


def _whole(n: float) -> str:
    return f"{n:,.0f}"
