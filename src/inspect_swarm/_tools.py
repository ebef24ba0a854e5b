from collections.abc import Callable

from inspect_ai.tool import Tool, ToolError, tool

from ._budget import BudgetUsage, SwarmBudget, format_cost, swarm_budget, token_noun


@tool
def swarm_resources() -> Tool:
    """A tool that reports the swarm's budget to the member that calls it.

    It shows the caps that will stop the swarm, how much all members have used, the member's own
    share when the budget is split, and the time cap. Use it in place of a tool that reads
    `sample_limits()`, which shows the sample's limits rather than the swarm's caps.
    """

    async def execute() -> str:
        """Report the swarm's budget: its caps, what all members have used, and your share.

        Returns:
            The swarm's caps with what has been used of each, and your own share of a split budget.
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
        _line("Cost", budget.cost, format_cost),
        _line("Tokens", budget.tokens, lambda n: f"{n:,.0f} {token_noun(budget.token_type)}"),
        _line("Time", budget.time, lambda s: f"{s:,.0f} seconds"),
    ]
    caps = [line for line in lines if line is not None]
    if not caps:
        return "The swarm has no caps: it stops only when the sample's own limits are reached."
    split = {"pool": "one pool shared by all members", "equal": "equal shares"}.get(
        str(budget.split), f"shares weighted {budget.split!r} in roster order"
    )
    head = f"The swarm's caps (cost and tokens are split as {split}):"
    return "\n".join([head, *caps])


def _line(label: str, usage: BudgetUsage | None, show: Callable[[float], str]) -> str | None:
    if usage is None:
        return None
    verb = "elapsed" if label == "Time" else "used by all members"
    line = f"- {label}: cap {show(usage.cap)}, {show(usage.used)} {verb}"
    if usage.share is not None:
        used = usage.share_used or 0.0
        line += f"; your share {show(usage.share)}, of which you used {show(used)}"
    return line + "."
