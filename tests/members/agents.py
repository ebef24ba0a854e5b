"""Member agents for the members tests: an in-process bridged agent and background workers."""

from typing import Any

import anyio
import anyio.lowlevel
from inspect_ai.agent import Agent, AgentState, agent, agent_bridge
from inspect_ai.log import EvalSample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.util import background, store


async def chat(calls: int) -> None:
    """Talk to the model named "inspect" through the OpenAI client, as a CLI agent would."""
    from openai import AsyncOpenAI

    # the bridge patches the client, so nothing reaches this address
    client = AsyncOpenAI(api_key="offline", base_url="http://127.0.0.1:9/v1")
    messages: list[Any] = [{"role": "user", "content": "work"}]
    for _ in range(calls):
        reply = await client.chat.completions.create(model="inspect", messages=messages)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        messages.append({"role": "user", "content": "go on"})


@agent
def cli_agent(calls: int = 20) -> Agent:
    """A bridged agent that needs no network: an in-process `agent_bridge()`."""

    async def execute(state: AgentState) -> AgentState:
        async with agent_bridge(state) as bridge:
            await chat(calls)
        return bridge.state

    return execute


def log(event: str) -> None:
    """Note an event in the sample store (read back from the log by `events`)."""
    events: list[str] = store().get("events", [])
    events.append(event)
    store().set("events", events)


def events(sample: EvalSample) -> list[str]:
    """The events `log` noted in the sample."""
    logged: list[str] = sample.store.get("events", [])
    return logged


def answered(state: AgentState, answer: str = "42") -> AgentState:
    state.output = ModelOutput.from_content("none", answer)
    return state


@agent
def background_worker(seconds: float = 0.1, calls: int = 0, wait: float = 0.0) -> Agent:
    """Starts one background task (`calls` model calls, then `seconds` of work) and returns,
    after `wait` seconds, without a model call of its own."""

    async def work() -> None:
        try:
            for _ in range(calls):
                await get_model().generate("background step")
            await anyio.sleep(seconds)
            log("finished")
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)  # cleanup that takes time
                log("cleaned up")
            raise

    async def execute(state: AgentState) -> AgentState:
        background(work)
        await anyio.sleep(wait)
        return answered(state)

    return execute


@agent
def background_in_factory(catch: bool = False) -> Agent:
    """Starts background work while the agent is built (and with `catch`, carries on when
    that is refused)."""

    async def work() -> None:
        await anyio.lowlevel.checkpoint()

    try:
        background(work)
    except RuntimeError:
        if not catch:
            raise

    async def execute(state: AgentState) -> AgentState:
        return answered(state)

    return execute


@agent
def bridged_with_background() -> Agent:
    """A bridged agent that tries to start background work."""

    async def execute(state: AgentState) -> AgentState:
        background(anyio.sleep, 1)
        return answered(state)

    return execute


@agent
def background_then_bridge() -> Agent:
    """A native agent that starts background work, then uses the agent bridge."""

    async def execute(state: AgentState) -> AgentState:
        background(anyio.sleep, 30)
        async with agent_bridge(state):
            await chat(1)
        return answered(state)

    return execute
