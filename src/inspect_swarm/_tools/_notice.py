"""`swarm_on_continue()`: a member's turn-boundary hook, which adds the channels' notices."""

from __future__ import annotations

from typing import Literal

from inspect_ai.agent import AgentContinue, AgentState

from .._context import current_swarm


def swarm_on_continue(
    inner: str | AgentContinue | None = None,
    *,
    no_tool_calls: Literal["continue", "stop"] = "continue",
    conversational: bool = False,
) -> AgentContinue:
    """Notices for a swarm member, as its agent's `on_continue` hook.

    Give it to the member's agent as its hook, `react(on_continue=swarm_on_continue())`, or
    wrap a hook the agent already has in it, `swarm_on_continue(inner)`; whether the member
    goes on or stops is decided just as it would be without the wrapper. What it adds: when a
    member in `notify` mode reaches a turn boundary and is not stopping, it gets a notice
    listing what has changed in the swarm's channels since the previous one (say, files of the
    shared memory that others wrote). The notice is a user message built from fixed text,
    counts, ids such as `f-3` and member names; nothing a member wrote ever appears in it.

    Notices go to the member's top-level loop only, never to its subagents. The hook adds
    nothing outside a swarm or for a member in `poll` mode.

    Under an activation policy the hook is also where the member waits between activations:
    its activation ends at the boundary (after each model step, or at the end of a
    `completion`), and when the policy activates it again the interventions queued for it are
    applied, the notice is added, and the agent goes on, still in its one run.

    Args:
        inner: The member's own hook, which this one wraps. A string is the message that
            continues the member after a turn with no tool calls, as a string `on_continue`
            does for `react()` with a submit tool; a function is awaited and what it returns is
            kept.
        no_tool_calls: When there is no `inner`: what the member does after a turn with no
            tool calls. It must match what the agent does without any hook: `"continue"` for
            `react()` with a submit tool and for `deepagent()`, `"stop"` for
            `react(submit=False)`. Ignored when `inner` is given.
        conversational: Under an activation policy, a reply without tool calls ends the
            activation rather than the member (or a prompt to continue), as
            `member(..., conversational=True)` does. Without a policy it changes nothing.

    Returns:
        The hook, for the agent's `on_continue`.

    Raises:
        ValueError: `no_tool_calls` is neither `"continue"` nor `"stop"`.
        TypeError: `inner` is not a string, an async `on_continue` function or `None`.
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
        if swarm is None:
            return result
        result = await swarm.between_quanta(state, result, conversational=conversational)
        if swarm.bus is None:
            return result
        # a member that stops here gets no notice, but its loop did run the hook
        notice = swarm.bus.notice(deliver=result is not False)
        if notice is not None:
            # react keeps the messages of a returned state, else of the state it passed
            target = result if isinstance(result, AgentState) else state
            target.messages.append(notice)
        return result

    return on_continue
