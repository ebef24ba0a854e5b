"""A node's agent (`NodeAgent`) on its own, as Ray runs it but in this process: the slots of
runs, their stops and starts in any order, and long-lived sandboxes, on asyncio and trio."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from threading import current_thread
from typing import Any, TypeVar

import anyio
import pytest

from inspect_swarm.server.engines.ray._node import HeldSandbox, NodeAgent, NodeJob, pack, unpack
from inspect_swarm.server.model._types import Outcome, RunSpec, SandboxInput, Size
from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import ROOT, IsolationConfig, SandboxError

from ....servers import needs_namespaces

pytestmark = needs_namespaces

T = TypeVar("T")

NODE = "node-a"


def spec(command: str) -> RunSpec:
    return RunSpec(command, Size(1, 1), 30, "base", None)


async def run(
    agent: NodeAgent,
    command: str,
    sandbox_id: str,
    keep: bool = True,
    files: dict[str, str] | None = None,
) -> Outcome:
    """Run a sandbox of the slot "slot" on `agent`, as the server asks it."""
    job = NodeJob("slot", sandbox_id, spec(command), SandboxInput(files=files or {}), {}, keep)
    return unpack(await agent.run(pack(job)), Outcome)


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[NodeAgent]:
    made = NodeAgent(IsolationConfig(tmp_path / "node"), NODE, "127.0.0.1")
    yield made
    await made.aclose()


def sandbox_dir(tmp_path: Path, sandbox_id: str) -> Path:
    return tmp_path / "node" / f"w{os.getpid()}" / "sbx" / sandbox_id


@pytest.mark.anyio
async def test_a_slot_runs_its_sandboxes_in_turn_each_made_anew(
    agent: NodeAgent, tmp_path: Path
) -> None:
    command = "cat /tmp/*; ls /tmp; hostname; echo $INSPECT_SWARM_NODE"
    first = await run(agent, command, "sbx-1", files={"/tmp/a": "one "})
    assert (first.status, first.stdout_tail) == ("succeeded", "one a\nsbx-1\nnode-a\n")
    # kept for the slot's next, which sees nothing the first left
    second = await run(agent, command, "sbx-2", keep=False, files={"/tmp/b": "two "})
    assert (second.status, second.stdout_tail) == ("succeeded", "two b\nsbx-2\nnode-a\n")
    # the last one's sandbox ended before its answer came
    assert not sandbox_dir(tmp_path, "sbx-1").exists()
    assert not sandbox_dir(tmp_path, "sbx-2").exists()


@pytest.mark.anyio
async def test_a_stop_ends_the_command_midway_and_keeps_its_output(agent: NodeAgent) -> None:
    outcome = None

    async def running() -> None:
        nonlocal outcome
        outcome = await run(agent, "echo begun; sleep 60", "sbx-1")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(running)
            await anyio.sleep(0.2)  # the run has reached the agent
            # answered once the command has begun
            assert await agent.started("slot", "sbx-1")
            await anyio.sleep(0.3)  # its output reaches the tails
            agent.stop("slot", "sbx-1")
    assert outcome is not None
    assert (outcome.status, outcome.stdout_tail) == ("cancelled", "begun\n")


@pytest.mark.anyio
async def test_a_stop_that_arrives_before_its_run_stops_it_there(agent: NodeAgent) -> None:
    agent.stop("slot", "sbx-1")  # Ray may start an async actor's calls out of order
    with anyio.fail_after(10):
        outcome = await run(agent, "echo ran", "sbx-1")
    assert (outcome.status, outcome.stdout_tail) == ("cancelled", None)
    # the slot's next sandbox is not stopped by it
    outcome = await run(agent, "echo ran", "sbx-2", keep=False)
    assert (outcome.status, outcome.stdout_tail) == ("succeeded", "ran\n")


@pytest.mark.anyio
async def test_started_answers_at_once_for_a_sandbox_not_running_here(
    agent: NodeAgent,
) -> None:
    with anyio.fail_after(5):
        assert not await agent.started("slot", "sbx-never")
        # a sandbox that ended before its command began (its file cannot be written)
        failed = await run(agent, "true", "sbx-1", files={"/dev/null/x": "x"})
        assert failed.status == "failed" and "boot failed" in (failed.error or "")
        assert not await agent.started("slot", "sbx-1")


@pytest.mark.anyio
async def test_the_end_of_a_slot_ends_the_sandbox_it_kept(agent: NodeAgent, tmp_path: Path) -> None:
    outcome = await run(agent, "true", "sbx-1")
    assert outcome.status == "succeeded"
    assert sandbox_dir(tmp_path, "sbx-1").exists()
    await agent.end_slot("slot")
    assert not sandbox_dir(tmp_path, "sbx-1").exists()


@pytest.mark.anyio
async def test_a_long_lived_sandbox_is_used_by_its_id(agent: NodeAgent, tmp_path: Path) -> None:
    assert await agent.create("sbx-live", Limits(2**30, 1)) == (True, None)
    ok, (key, _pid) = await agent.held(
        "sbx-live",
        HeldSandbox.exec,
        ["sh", "-c", "echo $INSPECT_SWARM_NODE"],
        {},
        None,
        ROOT,
        False,
        None,
    )
    assert ok
    assert await agent.held("sbx-live", HeldSandbox.read, key, "stdout") == (True, b"node-a\n")
    assert await agent.held("sbx-live", HeldSandbox.wait, key) == (True, 0)
    ok, error = await agent.held("sbx-other", HeldSandbox.wait, key)
    assert not ok and isinstance(error, SandboxError) and "not on node node-a" in str(error)
    assert await agent.close("sbx-live") == (True, None)
    assert not sandbox_dir(tmp_path, "sbx-live").exists()
    ok, error = await agent.held("sbx-live", HeldSandbox.wait, key)
    assert not ok and isinstance(error, SandboxError)


@pytest.mark.anyio
async def test_closing_the_agent_ends_every_sandbox_and_its_host(
    agent: NodeAgent, tmp_path: Path
) -> None:
    await run(agent, "true", "sbx-1")
    await agent.create("sbx-live", Limits(2**30, 1))
    await agent.aclose()
    assert not (tmp_path / "node" / f"w{os.getpid()}").exists()


async def worker_thread(_: HeldSandbox) -> threading.Thread:
    """The worker thread that runs a call's work off the event loop."""
    return await anyio.to_thread.run_sync(current_thread)


def test_calls_on_a_loop_without_a_root_share_worker_threads(tmp_path: Path) -> None:
    # as Ray runs an async actor: each call a task of its own on a loop in another thread
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()

    def call(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=30)

    try:
        agent = NodeAgent(IsolationConfig(tmp_path / "node"), NODE, "127.0.0.1")
        assert call(agent.create("sbx-live", Limits(2**30, 1))) == (True, None)
        threads = [call(agent.held("sbx-live", worker_thread)) for _ in range(5)]
        assert all(ok for ok, _ in threads)
        # one worker thread served them all, where each call would have started its own
        assert len({id(thread) for _, thread in threads}) == 1
        call(agent.aclose())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        running.join()
        loop.close()


UPPER = """\
import socket
server = socket.create_server(("127.0.0.1", 8000))
while True:
    conn, _ = server.accept()
    conn.sendall(conn.recv(100).upper())
    conn.close()
"""


async def open_port(agent: NodeAgent, sandbox_id: str, port: int) -> tuple[tuple[str, int], bytes]:
    """Open `port` of the sandbox once something listens there (the deadline a safety net)."""
    with anyio.fail_after(30):
        while True:
            ok, found = await agent.held(sandbox_id, HeldSandbox.open_port, port)
            if ok:
                return found  # type: ignore[no-any-return]
            assert isinstance(found, ConnectionRefusedError), found
            await anyio.sleep(0.05)


async def serve_upper(agent: NodeAgent, sandbox_id: str) -> None:
    """Make a sandbox serving UPPER on port 8000."""
    assert await agent.create(sandbox_id, Limits(2**30, 1)) == (True, None)
    argv = ["python3", "-c", UPPER]
    ok, _ = await agent.held(sandbox_id, HeldSandbox.exec, argv, {}, None, ROOT, False, None)
    assert ok


@pytest.mark.anyio
async def test_a_port_is_relayed_to_the_connection_that_sends_its_token(
    agent: NodeAgent,
) -> None:
    await serve_upper(agent, "sbx-live")
    address, token = await open_port(agent, "sbx-live", 8000)
    assert address[0] == "127.0.0.1"  # the node's address the agent was given
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.held, "sbx-live", HeldSandbox.relay_port, token)
            async with await anyio.connect_tcp(*address) as stream:
                await stream.send(token + b"hello")
                assert await stream.receive() == b"HELLO"
                with pytest.raises(anyio.EndOfStream):  # the sandbox's server closed it
                    await stream.receive()
    ok, refused = await agent.held("sbx-live", HeldSandbox.open_port, 8001)
    assert not ok and isinstance(refused, ConnectionRefusedError)
    await agent.close("sbx-live")
