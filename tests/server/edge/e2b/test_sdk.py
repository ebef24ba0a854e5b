"""The unmodified e2b SDK, sync and async, end to end against the local swarm server."""

from __future__ import annotations

import time
import uuid

import pytest
from e2b import (
    AsyncSandbox,
    CommandExitException,
    InvalidArgumentException,
    Sandbox,
    SandboxQuery,
    TimeoutException,
)

from ....e2b_servers import live_sandboxes
from ....servers import Server

pytestmark = pytest.mark.usefixtures("e2b_env")


def test_run_files_list_and_kill_with_the_sync_sdk(server: Server) -> None:
    tag = uuid.uuid4().hex
    sbx = Sandbox.create(metadata={"test": tag}, envs={"GREETING": "hello"})
    try:
        result = sbx.commands.run("echo $GREETING; whoami; pwd; echo oops >&2")
        assert (result.stdout, result.stderr, result.exit_code) == (
            "hello\nuser\n/home/user\n",
            "oops\n",
            0,
        )
        assert sbx.commands.run("whoami", user="root").stdout == "root\n"
        with pytest.raises(CommandExitException) as failed:
            sbx.commands.run("exit 3")
        assert failed.value.exit_code == 3

        streamed: list[str] = []
        sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.1; done", on_stdout=streamed.append)
        assert "".join(streamed) == "1\n2\n3\n"

        handle = sbx.commands.run("cat", background=True, stdin=True)
        sbx.commands.send_stdin(handle.pid, "fed through stdin\n")
        sbx.commands.close_stdin(handle.pid)
        assert handle.wait().stdout == "fed through stdin\n"

        sbx.files.write("/tmp/blob.bin", b"\x00\xff\xc3\x28")
        assert bytes(sbx.files.read("/tmp/blob.bin", format="bytes")) == b"\x00\xff\xc3\x28"
        sbx.files.write("empty.txt", b"")
        assert sbx.files.read("empty.txt") == ""
        info = sbx.files.get_info("empty.txt")
        assert (info.path, info.size, info.owner) == ("/home/user/empty.txt", 0, "user")
        assert sbx.files.make_dir("d/e") and not sbx.files.make_dir("d/e")
        sbx.files.rename("empty.txt", "d/e/moved.txt")
        assert [e.name for e in sbx.files.list("d/e")] == ["moved.txt"]
        sbx.files.remove("d")
        assert not sbx.files.exists("d")

        found = Sandbox.list(query=SandboxQuery(metadata={"test": tag})).next_items()
        assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
        assert found[0].metadata == {"test": tag}
    finally:
        sbx.kill()
    assert Sandbox.list(query=SandboxQuery(metadata={"test": tag})).next_items() == []


def test_a_command_timeout_kills_its_whole_process_tree() -> None:
    sbx = Sandbox.create()
    try:
        with pytest.raises(TimeoutException):
            sbx.commands.run("sleep 30 & sleep 31; :", timeout=1)
        time.sleep(0.5)
        left = sbx.commands.run("ps -eo args | grep -c '^sleep 3[01]' || true").stdout
        assert left.strip() == "0"
    finally:
        sbx.kill()


def test_a_sandbox_ends_when_its_timeout_passes(server: Server) -> None:
    sbx = Sandbox.create(timeout=30)
    sbx.set_timeout(1)
    deadline = time.monotonic() + 20
    while any(s["sandboxID"] == sbx.sandbox_id for s in live_sandboxes(server)):
        assert time.monotonic() < deadline, "the sandbox outlived its timeout"
        time.sleep(0.1)
    assert not sbx.is_running()


def test_sandboxes_are_isolated_from_each_other() -> None:
    first, second = Sandbox.create(), Sandbox.create()
    try:
        first.files.write("/tmp/mine.txt", "first's")
        assert not second.files.exists("/tmp/mine.txt")
        assert first.commands.run("hostname").stdout.strip() == first.sandbox_id
    finally:
        first.kill()
        second.kill()


def test_a_fifo_or_device_is_no_file_to_read_or_write() -> None:
    sbx = Sandbox.create()
    try:
        sbx.commands.run("mkfifo /tmp/pipe")
        for path in ("/tmp/pipe", "/dev/zero"):
            with pytest.raises(InvalidArgumentException, match="not a regular file"):
                sbx.files.read(path)
        with pytest.raises(InvalidArgumentException, match="not a regular file"):
            sbx.files.write("/tmp/pipe", "x")
        assert sbx.commands.run("echo alive").stdout == "alive\n"
    finally:
        sbx.kill()


def test_an_agent_inside_a_sandbox_creates_a_child_sandbox(server: Server) -> None:
    import sys

    agent = (
        "from e2b import Sandbox\n"
        "child = Sandbox.create(metadata={'made': 'inside'})\n"
        "print(child.sandbox_id, child.commands.run('hostname').stdout.strip())\n"
    )
    parent = Sandbox.create()
    child_id = None
    try:
        parent.files.write("/tmp/agent.py", agent)
        # the SDK reads E2B_API_KEY (the lease's mlk_ key) and the URLs from the sandbox
        result = parent.commands.run(f"{sys.executable} /tmp/agent.py", user="root", timeout=60)
        child_id, hostname = result.stdout.split()
        assert child_id == hostname != parent.sandbox_id
        key = parent.commands.run("echo $E2B_API_KEY").stdout.strip()
        assert key.startswith("mlk_")
        assert any(s["sandboxID"] == child_id for s in live_sandboxes(server))
    finally:
        parent.kill()
        if child_id is not None:
            Sandbox.kill(child_id)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_run_files_and_kill_with_the_async_sdk(anyio_backend: str) -> None:
    sbx = await AsyncSandbox.create(metadata={"async": "yes"})
    try:
        result = await sbx.commands.run("printf 'a\\0b' | od -An -c | tr -s ' '")
        assert result.stdout.split() == ["a", "\\0", "b"]
        with pytest.raises(CommandExitException):
            await sbx.commands.run("false")
        await sbx.files.write("data.bin", b"\x01\x02")
        assert bytes(await sbx.files.read("data.bin", format="bytes")) == b"\x01\x02"
        handle = await sbx.commands.run("sleep 30", background=True)
        assert [p.pid for p in await sbx.commands.list()] == [handle.pid]
        await sbx.commands.kill(handle.pid)
        paginator = AsyncSandbox.list(query=SandboxQuery(metadata={"async": "yes"}))
        assert [s.sandbox_id for s in await paginator.next_items()] == [sbx.sandbox_id]
    finally:
        await sbx.kill()
    assert not await sbx.is_running()
