"""The Ray engine's hand-over (`Dispatch`), as the actor runs it: on asyncio, without Ray."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from inspect_swarm.server._model import SandboxInput
from inspect_swarm.server._ray_node import Dispatch, NodeJob


def job(name: str) -> NodeJob:
    return NodeJob(name, SandboxInput(), {})


async def collect(jobs: AsyncIterator[NodeJob]) -> list[str]:
    return [j.sandbox_id async for j in jobs]


def run(test: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(test, 5))


def test_a_slot_gets_its_sandboxes_in_order_until_the_server_has_none() -> None:
    async def test() -> None:
        dispatch = Dispatch()
        dispatch.give("r", "s", job("a"))  # given before the slot asks: kept for it
        stream = asyncio.create_task(collect(dispatch.jobs("r", "s")))
        await asyncio.sleep(0)
        dispatch.give("r", "s", job("b"))
        dispatch.give("r", "other", job("x"))
        dispatch.give("r", "s", None)
        assert await stream == ["a", "b"]

    run(test())


def test_a_cancel_ends_every_slot_of_the_run_and_those_that_ask_later() -> None:
    async def test() -> None:
        dispatch = Dispatch()
        waiting = asyncio.create_task(collect(dispatch.jobs("r", "s1")))
        elsewhere = asyncio.create_task(collect(dispatch.jobs("q", "s1")))
        await asyncio.sleep(0)
        dispatch.cancel("r")
        assert await waiting == []
        assert await collect(dispatch.jobs("r", "s2")) == []
        assert not elsewhere.done()
        dispatch.give("q", "s1", job("kept"))
        dispatch.give("q", "s1", None)
        assert await elsewhere == ["kept"]

    run(test())


def test_a_forgotten_run_leaves_nothing_and_its_waiting_slots_end() -> None:
    async def test() -> None:
        dispatch = Dispatch()
        waiting = asyncio.create_task(collect(dispatch.jobs("r", "s1")))
        await asyncio.sleep(0)
        dispatch.give("r", "s2", job("never asked for"))  # a slot whose task died
        dispatch.forget("r")
        assert await waiting == []
        assert dispatch._runs == {}

    run(test())


@pytest.mark.parametrize("ending", ["stop", "cancel"])
def test_a_slots_stream_that_ended_keeps_no_queue(ending: str) -> None:
    async def test() -> None:
        dispatch = Dispatch()
        stream = asyncio.create_task(collect(dispatch.jobs("r", "s")))
        await asyncio.sleep(0)
        if ending == "stop":
            dispatch.give("r", "s", None)
        else:
            dispatch.cancel("r")
        await stream
        assert dispatch._runs["r"].queues == {}

    run(test())
