"""Who may use a channel: its readers and writers, the swarm's routes, the read cutoff of a
superstep, and exposure checked against model inputs, driven directly through the bus."""

from __future__ import annotations

from typing import Any

import pytest
from inspect_ai.model import ChatMessageTool, ChatMessageUser

from inspect_swarm import messages, notes, record_exposure, shared_memory
from inspect_swarm._runtime._bus._bus import SwarmBus

from .helpers import FakeHost, acting, comm_events, use

pytestmark = pytest.mark.anyio


def host(*channels: Any, routes: list[tuple[str, str]] | None = None) -> FakeHost:
    h = FakeHost(["a", "b", "c"], list(channels))
    h.bus_ = SwarmBus(h, list(channels), h.comms, routes=routes, exposure=True)  # type: ignore[arg-type]
    return h


async def test_writers_and_readers_of_the_board() -> None:
    h = host(shared_memory(readers=["a", "b"], writers=["a"]))
    create = {"command": "create", "path": "/shared_memory/x", "file_text": "plan"}
    assert (await use(h, "shared_memory", "a", **create)).startswith("Wrote f-1")
    refused = await use(h, "shared_memory", "b", **create)
    assert refused.startswith("ERROR: Write refused: b may not write to shared_memory; only a")
    assert "plan" in await use(h, "shared_memory", "b", command="view", path="f-1")
    denied = await use(h, "shared_memory", "c", command="view", path="f-1")
    assert denied.startswith("ERROR: You may not read shared_memory: c is not among its readers")
    [sent] = [e for e in comm_events("sent") if e["refused"]]
    assert (sent["member"], sent["refused"]["control"]) == ("b", "writers")
    # c hears nothing of a channel it may not read
    with acting("c"):
        assert h.bus.notice() is None


async def test_a_message_reaches_only_readers_and_routes() -> None:
    h = host(messages(readers=["b", "c"]), routes=[("a", "b"), ("a", "c"), ("b", "a")])
    sent = await use(h, "messages", "a", command="send", to="all", text="hello")
    assert sent.startswith("Sent m-1 to b, c")
    # b's only route is to a, who is no reader
    refused = await use(h, "messages", "b", command="send", to="a", text="hi")
    assert refused.startswith("ERROR: Message refused: b has no route to a.")
    assert [e["refused"]["control"] for e in comm_events("sent") if e["refused"]] == ["route"]


async def test_reads_during_a_cutoff_show_what_was_delivered_before_it() -> None:
    h = host(messages(), notes())
    await use(h, "messages", "a", command="send", to="b", text="first")
    with h.bus_.cutoff():
        await use(h, "messages", "a", command="send", to="b", text="second")
        await use(h, "notes", "a", command="add", kind="fact", text="a note")
        during = await use(h, "messages", "b", command="read")
        assert "first" in during and "second" not in during
        assert "a note" not in await use(h, "notes", "b", command="read")
    after = await use(h, "messages", "b", command="read")
    assert "second" in after and "first" not in after
    assert "a note" in await use(h, "notes", "b", command="read")


async def test_board_reads_during_a_cutoff_show_the_files_as_they_were() -> None:
    h = host(shared_memory())
    create = {"command": "create", "path": "/shared_memory/x", "file_text": "v1"}
    await use(h, "shared_memory", "a", **create)
    await use(h, "shared_memory", "b", command="view", path="f-1")
    with h.bus_.cutoff():
        await use(
            h, "shared_memory", "a", command="append", path="/shared_memory/x", append_text="v2"
        )
        await use(
            h, "shared_memory", "a", command="append", path="/shared_memory/y", append_text="new"
        )
        during = await use(h, "shared_memory", "b", command="view", path="f-1")
        assert "v1" in during and "v2" not in during and 'version="1"' in during
        listing = await use(h, "shared_memory", "b", command="view", path="/shared_memory")
        assert "f-1\t/shared_memory/x\tversion 1" in listing and "/shared_memory/y" not in listing
        assert "not shown yet" in await use(h, "shared_memory", "b", command="view", path="f-2")
    after = await use(h, "shared_memory", "b", command="view", path="f-1")
    assert "v2" in after and 'version="2"' in after


async def test_what_a_member_read_is_exposed_when_an_input_holds_it() -> None:
    h = host(messages())
    await use(h, "messages", "a", command="send", to="b", text="the code is 7141")
    shown = await use(h, "messages", "b", command="read")
    [read] = comm_events("read")
    with acting("b"):
        # an input without the text confirms nothing; the one with it does, once
        assert record_exposure([ChatMessageUser(content="unrelated")]) == []
        assert record_exposure([ChatMessageTool(content=shown)]) == ["m-1"]
        assert record_exposure([ChatMessageTool(content=shown)]) == []
    [exposed] = comm_events("exposed")
    assert exposed["read"] == read["read"] and exposed["record"] == "m-1"
    assert (exposed["member"], exposed["observed"], exposed["event"]) == ("b", "manual", None)


def test_record_exposure_needs_a_member() -> None:
    with pytest.raises(RuntimeError, match=r"record_exposure\(\): no swarm member is running"):
        record_exposure([])
