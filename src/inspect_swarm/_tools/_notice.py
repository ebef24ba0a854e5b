"""`swarm_on_continue()`: a member's turn-boundary hook, which adds the channels' notices."""

from __future__ import annotations

from typing import Literal

from inspect_ai.agent import AgentContinue, AgentState

from .._context import current_swarm


def swarm_on_continue(
    inner: str | AgentContinue | None = None,
    *,
    no_tool_calls: Literal["continue", "stop"] = "continue",
) -> AgentContinue:
    """Notices for a swarm member, as its agent's `on_continue` hook.

    Pass it as the member's hook, `react(on_continue=swarm_on_continue())`, or around the
    hook the member would otherwise have, `swarm_on_continue(inner)`. The member then
    continues or stops exactly as it would without it. At each of its turn boundaries,
    unless it is stopping, a member in `notify` mode gets a notice of what changed in the
    swarm's channels since its last notice, such as shared memory files other agents wrote.
    A notice is a user message with fixed text: counts, ids such as `f-3` and member names,
    never what a member wrote.

    Only the member's own loop gets notices, not its subagents. Outside a swarm, or for a
    member in `poll` mode, it adds nothing.

    Args:
        inner: The hook the member would otherwise have. A string continues the member with
            that message after a turn without tool calls, as it does as `on_continue` of
            `react()` with a submit tool. A function is called and its result kept.
        no_tool_calls: Without `inner`, what the member does after a turn without tool
            calls, which must be what its agent does with no hook: `"continue"` for
            `react()` with a submit tool and for `deepagent()`, `"stop"` for
            `react(submit=False)`. Ignored when `inner` is given.

    Returns:
        The hook.
    """
    if no_tool_calls not in ("continue", "stop"):
        raise ValueError(
            f"swarm_on_continue(): no_tool_calls must be 'continue' or 'stop', not "
            f"{no_tool_calls!r}. Use 'stop' for react(submit=False), 'continue' otherwise."
        )
    if not (inner is None or isinstance(inner, str) or callable(inner)):
        raise TypeError(
            f"swarm_on_continue(): inner must be a string, an async on_continue function or "
            f"None, not {type(inner).__name__}."
        )

    async def decide(state: AgentState) -> bool | str | AgentState:
        # exactly what the agent would do without this hook
        if callable(inner):
            return await inner(state)
        if state.output.message.tool_calls:
            return True
        if isinstance(inner, str):
            return inner
        return no_tool_calls == "continue"

    async def on_continue(state: AgentState) -> bool | str | AgentState:
        result = await decide(state)
        swarm = current_swarm()
        if swarm is None or swarm.bus is None:
            return result
        # a member that stops here gets no notice, but its loop did run the hook
        notice = swarm.bus.notice(deliver=result is not False)
        if notice is not None:
            # react keeps the messages of a returned state, else of the state it passed
            target = result if isinstance(result, AgentState) else state
            target.messages.append(notice)
        return result

    return on_continue
