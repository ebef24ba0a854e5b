"""Host child processes shared by several tasks: a command's stream and its sandbox's end."""

from __future__ import annotations

import contextlib
import os
import signal

import anyio
import pytest

from inspect_swarm.server.sandboxes._child_process import ChildProcess, SpawnOptions, spawn
from inspect_swarm.server.sandboxes._isolation import DEFAULT_PATH

pytestmark = pytest.mark.anyio


def _start(script: str) -> ChildProcess:
    return spawn(SpawnOptions(argv=["sh", "-c", script], env={"PATH": DEFAULT_PATH}))


async def test_several_tasks_wait_for_one_process() -> None:
    process = _start("sleep 0.2; exit 3")
    codes: list[int] = []

    async def wait() -> None:
        codes.append(await process.wait())

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(wait)
    assert codes == [3, 3, 3]
    process.close()


async def test_closing_a_process_wakes_its_readers_and_leaves_the_loop_sound() -> None:
    # the child's child keeps stdout open after the child itself exits
    process = _start("sleep 30 & echo started")
    output: list[bytes] = []

    async def read() -> None:
        output.extend([chunk async for chunk in process.chunks("stdout")])

    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                assert await process.wait() == 0
                await anyio.wait_all_tasks_blocked()
                process.close()
        assert b"".join(output) == b"started\n"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    # the descriptors' numbers come back at once: a stale watch on them would hang this
    with anyio.fail_after(20):
        for _ in range(3):
            again = _start("true")
            assert await again.wait() == 0
            again.close()


async def test_writing_to_a_closed_stdin_is_a_broken_pipe() -> None:
    process = spawn(
        SpawnOptions(argv=["sh", "-c", "sleep 30"], env={"PATH": DEFAULT_PATH}, stdin=True)
    )
    try:
        process.close_stdin()
        with pytest.raises(BrokenPipeError):
            await process.write_stdin(b"late")
    finally:
        process.signal(signal.SIGKILL)
        await process.wait()
        process.close()
