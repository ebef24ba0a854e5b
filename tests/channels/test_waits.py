"""swarm_wait, notices and swarm_tools, driven directly through the bus."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from inspect_ai.agent import AgentState
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput
from inspect_ai.tool import ToolCall, ToolError

from inspect_swarm._channels._filesystem_channel import filesystem
from inspect_swarm._channels._shared_memory import shared_memory
from inspect_swarm._contracts._channel import Channel, ChannelRun, ChannelState
from inspect_swarm._tools._channel_tools import swarm_tools
from inspect_swarm._tools._notice import swarm_on_continue

from .helpers import FakeHost, acting, call, comm_events, tool_named, waiting

pytestmark = pytest.mark.anyio

F = "/shared_memory"


async def wait(h: FakeHost, member: str, loop: str | None = None, **args: Any) -> str:
    with acting(member):
        h.bus.channel_tools(member)
    with acting(member, loop):
        tool = tool_named(h.bus.channel_tools(member), "swarm_wait")
        try:
            return str(await tool(**args))
        except ToolError as error:
            return f"ERROR: {error.message}"


def outcomes() -> list[str]:
    return [e["outcome"] for e in comm_events("waited")]


async def test_wait_returns_at_once_with_news_and_keeps_returning() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    await call(h, "a", command="create", path=f"{F}/x", file_text="secret")
    for _ in range(2):
        result = await wait(h, "b")
        assert "1 file changed that you have not viewed (f-1 by a)" in result
        assert "secret" not in result and "/shared_memory/x" not in result
    await call(h, "b", command="view", path="f-1")
    # now nothing is news: a is running, so the wait blocks until the timeout
    assert "no news after" in await h_wait_timeout(h, "b")
    assert outcomes() == ["news", "news", "timeout"]


async def h_wait_timeout(h: FakeHost, member: str) -> str:
    with acting(member):
        return await h.bus.wait(None, 0.01)


async def test_wait_woken_by_a_subagent_write() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    results: list[str] = []

    async def own_wait() -> None:
        results.append(await wait(h, "a"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(own_wait)
        await waiting(h, 1)
        await call(h, "a", "sub-a", command="append", path=f"{F}/out", append_text="done")
    assert "f-1 by a" in results[0]
    [waited] = comm_events("waited")
    assert waited["outcome"] == "news" and waited["files"][0]["file"] == "f-1"


async def test_wait_filters_by_path_and_ignores_own_writes() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    results: list[str] = []

    async def b_waits() -> None:
        results.append(await wait(h, "b", path=f"{F}/watched"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(b_waits)
        await waiting(h, 1)
        await call(h, "a", command="append", path=f"{F}/other", append_text="x")
        await call(h, "b", command="append", path=f"{F}/watched/own", append_text="x")
        assert not results
        await call(h, "a", command="append", path=f"{F}/watched/it", append_text="x")
    assert "f-3 by a" in results[0] and "f-1" not in results[0]
    assert (await wait(h, "b", path="/etc")).startswith("ERROR: Invalid path")


async def test_wait_when_every_other_member_is_already_waiting() -> None:
    h = FakeHost(["a", "b", "c"], [shared_memory()])
    h.states["c"] = "pending"
    results: list[str] = []

    async def waits(member: str) -> None:
        results.append(await wait(h, member))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waits, "a")
        await waiting(h, 1)
        tg.start_soon(waits, "b")
    assert len(results) == 2 and all("every member is waiting" in r for r in results)
    assert outcomes() == ["all_waiting", "all_waiting"]


async def test_a_subagent_wait_makes_its_member_waiting() -> None:
    # b's own loop is in the tool call of its subagent, which waits: nobody can write news
    h = FakeHost(["a", "b"], [shared_memory()])
    with anyio.fail_after(30):  # the waits' own timeout is 600 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, h, "a", None)
            tg.start_soon(wait, h, "b", "sub-b")
    assert outcomes() == ["all_waiting", "all_waiting"]


async def test_background_work_keeps_a_member_from_waiting() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    h.background["b"] = 1
    results: list[str] = []

    async def waits(member: str) -> None:
        results.append(await wait(h, member))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waits, "a")
        tg.start_soon(waits, "b")
        await waiting(h, 2)
        await anyio.sleep(0.05)
        assert not results
        h.background["b"] = 0  # the wait's next re-check sees every member waiting
    assert outcomes() == ["all_waiting", "all_waiting"]


async def test_stop_releases_every_pending_wait() -> None:
    h = FakeHost(["a", "b", "c"], [shared_memory()])
    results: list[str] = []

    async def waits(member: str, loop: str | None = None) -> None:
        results.append(await wait(h, member, loop))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waits, "a")
        tg.start_soon(waits, "a", "sub-a")
        tg.start_soon(waits, "b")
        await waiting(h, 3)
        h.stop()
    assert results == ["Wait ended: the swarm is stopping."] * 3
    assert "stopping" in await wait(h, "c")  # a wait after the stop ends at once
    assert h.bus.member_metrics("a")["waits_by_outcome"] == {"stopping": 2}


async def test_member_ended_is_news_and_agent_returned_ends_own_waits() -> None:
    h = FakeHost(["a", "b", "c"], [shared_memory()])
    results: dict[str, str] = {}

    async def waits(member: str, loop: str | None = None) -> None:
        results[f"{member}{loop or ''}"] = await wait(h, member, loop)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waits, "a")
        tg.start_soon(waits, "c", "sub-c")
        await waiting(h, 2)
        h.returned.add("c")
        h.bus.agent_returned("c")
        await anyio.sleep(0.01)
        h.end("b", "submitted")
    assert results["csub-c"] == "Wait ended: your agent has finished."
    assert "Members ended: b (submitted)." in results["a"]
    # a loop is told of an ended member once
    assert "no news" in await h_wait_timeout(h, "a")


async def test_timeout_is_bounded_by_max_wait() -> None:
    h = FakeHost(["a", "b"], [shared_memory(max_wait=1)])
    h.now = 0.0
    assert h.bus.max_wait == 1
    assert (await wait(h, "a", timeout=0)).startswith("ERROR: timeout must be")
    with acting("a"):
        with anyio.fail_after(5):
            result = await h.bus.wait(None, 100)
    assert result == "Wait ended: no news after 1 seconds."


async def test_cancelled_wait_is_recorded() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    with anyio.move_on_after(0.02):
        await wait(h, "a")
    assert outcomes() == ["cancelled"]
    metrics = h.bus.member_metrics("a")
    assert metrics["waits"] == 1 and metrics["waits_by_outcome"] == {"cancelled": 1}


async def test_idle_time_counts_own_waits_only() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])

    async def waits(loop: str | None) -> None:
        await wait(h, "a", loop)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waits, None)
        tg.start_soon(waits, "sub-a")
        await waiting(h, 2)
        h.now = 4.0
        await call(h, "b", command="append", path=f"{F}/x", append_text="x")
    metrics = h.bus.member_metrics("a")
    assert metrics["wait_time"] == 8.0 and metrics["idle_time"] == 4.0


# -- notices -------------------------------------------------------------------------------


def turn(tool_calls: bool) -> AgentState:
    calls = [ToolCall(id="1", function="bash", arguments={})] if tool_calls else None
    message = ChatMessageAssistant(content="ok", tool_calls=calls)
    state = AgentState(messages=[ChatMessageUser(content="task"), message])
    state.output = ModelOutput.from_message(message)
    return state


async def test_notice_at_turn_boundary_once_per_change() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    hook = swarm_on_continue()
    await call(h, "a", command="create", path=f"{F}/x", file_text="content")
    state = turn(tool_calls=True)
    with acting("b"):
        assert await hook(state) is True
    notice = state.messages[-1]
    assert notice.text == (
        "[Swarm notice] 1 shared memory file changed since you last viewed it (f-1 new; by a). "
        'View one with shared_memory(command="view", path="f-1"), or list them with '
        'path="/shared_memory".'
    )
    assert notice.metadata == {
        "inspect_swarm": {
            "notice": "n-1",
            "lines": [
                {
                    "channel": "shared_memory",
                    "ids": {"files": [{"file": "f-1", "version": 1, "record": "w-1"}]},
                }
            ],
        }
    }
    [notified] = comm_events("notified")
    assert notified["notice"] == "n-1" and notified["member"] == "b" and not notified["nested"]
    # the notice covers f-1 until it changes again
    again = turn(tool_calls=True)
    with acting("b"):
        await hook(again)
    assert len(again.messages) == 2
    await call(h, "a", command="append", path=f"{F}/x", append_text="more")
    with acting("b"):
        await hook(again)
    assert "(f-1 changed; by a)" not in again.messages[-1].text  # b never viewed it: still new
    assert "(f-1 new; by a)" in again.messages[-1].text
    assert h.bus.member_metrics("b")["comm"]["shared_memory"]["notices"] == 2  # type: ignore[index]


async def test_no_notice_to_subagents_poll_members_or_while_stopping() -> None:
    h = FakeHost(["a", "b", "c"], [shared_memory()], delivery={"c": "poll"})
    hook = swarm_on_continue()
    await call(h, "a", command="create", path=f"{F}/x", file_text="content")
    for member, loop in [("b", "sub-b"), ("c", None)]:
        state = turn(tool_calls=True)
        with acting(member, loop):
            assert await hook(state) is True
        assert len(state.messages) == 2
    h.is_stopping = True
    state = turn(tool_calls=True)
    with acting("b"):
        await hook(state)
    assert len(state.messages) == 2 and not comm_events("notified")


@pytest.mark.parametrize("tool_calls", [True, False])
async def test_continuation_is_what_the_agent_would_do(tool_calls: bool) -> None:
    h = FakeHost(["a", "b"], [shared_memory()])

    async def inner(state: AgentState) -> bool | str | AgentState:
        return "keep going" if tool_calls else False

    cases: list[tuple[Any, Any]] = [
        (swarm_on_continue(), True),
        (swarm_on_continue(no_tool_calls="stop"), tool_calls),
        (swarm_on_continue("Use {submit}."), True if tool_calls else "Use {submit}."),
        (swarm_on_continue(inner), "keep going" if tool_calls else False),
    ]
    for hook, expected in cases:
        await call(h, "a", command="append", path=f"{F}/x", append_text="x")
        with acting("b"):
            assert await hook(turn(tool_calls)) == expected
    # outside a swarm the hook only decides
    from inspect_swarm._context import _swarm

    token = _swarm.set(None)
    try:
        state = turn(False)
        assert await swarm_on_continue()(state) is True and len(state.messages) == 2
    finally:
        _swarm.reset(token)


async def test_notice_goes_into_a_returned_state() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    replacement = turn(tool_calls=False)

    async def inner(state: AgentState) -> AgentState:
        return replacement

    await call(h, "a", command="append", path=f"{F}/x", append_text="x")
    with acting("b"):
        assert await swarm_on_continue(inner)(turn(True)) is replacement
    assert replacement.messages[-1].text.startswith("[Swarm notice]")


def test_swarm_on_continue_arguments() -> None:
    with pytest.raises(ValueError, match="no_tool_calls must be 'continue' or 'stop'"):
        swarm_on_continue(no_tool_calls="halt")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inner must be"):
        swarm_on_continue(3)  # type: ignore[arg-type]


# -- swarm_tools ---------------------------------------------------------------------------


class LoopChannel(Channel):
    """A channel whose tool reaches only the member's own loop."""

    name = "loop_only"
    prefix = "l"

    def open(self, run: ChannelRun) -> ChannelState:
        from inspect_ai.tool import ToolDef

        async def ping() -> str:
            """Ping."""
            return "pong"

        class State:
            def tools(self) -> list[Any]:
                return [ToolDef(ping, name="ping").as_tool()]

            def validate(self, record: Any) -> None: ...
            def admit(self, record: Any) -> None: ...
            def apply(self, record: Any) -> Any:
                return [], None

            def notice_lines(self, member: str) -> list[Any]:
                return []

        return State()


def names(tools: list[Any]) -> list[str]:
    from inspect_ai._util.registry import registry_info

    return [registry_info(t).name for t in tools]


async def test_swarm_tools_by_loop_and_reach() -> None:
    source = swarm_tools()
    assert await source.tools() == []  # outside a swarm
    FakeHost(["a", "b"], [shared_memory(), LoopChannel()])
    assert await source.tools() == []  # in the swarm, outside every member
    with acting("a"):
        assert names(await source.tools()) == ["shared_memory", "ping", "swarm_wait"]
    with acting("a", "sub-a"):
        assert names(await source.tools()) == ["shared_memory", "swarm_wait"]
    only_loop = FakeHost(["a", "b"], [LoopChannel()])
    with acting("a", "sub-a"):
        only_loop.bus.channel_tools("a")  # the first loop to resolve is the member's own
    with acting("a"):
        assert names(await source.tools()) == []
    assert not only_loop.bus.wakes_waits and only_loop.bus.member_metrics("a")["waits"] is None
    none = FakeHost(["a", "b"], [filesystem()])
    with acting("a"):
        assert await source.tools() == []
    assert not none.bus.has_tools
    assert none.bus.member_metrics("a") == {
        "comm": {}, "waits": None, "waits_by_outcome": None, "wait_time": None, "idle_time": None,
    }  # fmt: skip


async def test_metrics_and_wiring() -> None:
    h = FakeHost(["a", "b"], [shared_memory()])
    assert h.bus.member_metrics("b")["comm"] == {
        "shared_memory": {
            "records": 0, "record_bytes": 0, "rejections": {}, "reads": 0, "listings": 0,
            "notices": 0,
        }
    }  # fmt: skip
    await call(h, "a", command="append", path=f"{F}/x", append_text="héllo")
    await call(h, "a", command="view", path="f-1")
    await call(h, "a", command="view", path=F)
    comm = h.bus.member_metrics("a")["comm"]["shared_memory"]  # type: ignore[index]
    assert (comm["records"], comm["record_bytes"], comm["reads"], comm["listings"]) == (1, 6, 1, 1)
    # b never resolved swarm_tools nor ran the hook; it made no model call, so it is not listed
    assert h.bus.wiring() == {"notify_unwired": [], "tools_unwired": []}
