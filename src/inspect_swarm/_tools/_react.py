"""`swarm_react()`: a `react()` member wired to the swarm's channels, for the command line."""

import inspect
from typing import Any

from inspect_ai.agent import Agent, agent, react

from ._channel_tools import swarm_tools
from ._notice import swarm_on_continue


@agent
def swarm_react(**react_args: Any) -> Agent:
    """A `react()` member builder that gives the member the swarm's channels.

    It builds `react(**react_args)` with `swarm_tools()` added to its tools and
    `swarm_on_continue()` around its `on_continue`, so the member gets the tools of the
    swarm's channels (such as the shared-memory board) and, in `notify` mode, their notices.
    The member continues or stops after a turn exactly as `react()` would. Pass it to
    `member()` without calling it, `member(swarm_react, args={"tools": [bash()]}, count=3)`,
    or by name from the command line, `-S 'members={factory: swarm_react, count: 3}'`. The
    log records it by name and arguments, like any builder, so the swarm can be rebuilt from
    the log. Outside a swarm, or in one with no channel with tools, it is plain `react()`.

    Args:
        **react_args: The arguments of `react()`.

    Returns:
        The member's agent.

    Raises:
        ValueError: A string `on_continue` with `submit=False`, which `react()` never uses.
    """
    tools = [*(react_args.pop("tools", None) or []), swarm_tools()]
    on_continue = react_args.pop("on_continue", None)
    no_submit = react_args.get("submit") is False
    if no_submit and isinstance(on_continue, str):
        raise ValueError(
            f"swarm_react(on_continue=...): on_continue={on_continue!r} with submit=False: "
            "react() without a submit tool stops after a turn without tool calls, so a message "
            "to continue with is never used. Pass an async on_continue function, or none."
        )
    hook = swarm_on_continue(on_continue, no_tool_calls="stop" if no_submit else "continue")
    return react(tools=tools, on_continue=hook, **react_args)


# member() checks a builder's arguments against its signature: these are react()'s own
swarm_react.__signature__ = inspect.signature(react)  # type: ignore[attr-defined]
