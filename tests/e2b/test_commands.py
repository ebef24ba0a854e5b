"""Commands of long-lived sandboxes on the server's engine: a stopping server, a dead sandbox."""

from __future__ import annotations

import base64
import gc
import select
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo
from connectrpc.request import Headers, RequestContext
from e2b.envd.process import process_pb as pb

from inspect_swarm.server._serve import assemble
from inspect_swarm.server.domain._long_lived import LongLivedSandbox
from inspect_swarm.server.domain._swarms import Swarms
from inspect_swarm.server.edge.e2b._envd import Envd
from inspect_swarm.server.edge.e2b._process_service import Command, ProcessService
from inspect_swarm.server.model._keys import Owner
from inspect_swarm.server.model._types import SandboxSpec, Settings, Size
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import (
    IsolationConfig,
    NamespaceSandbox,
    Sandbox,
    SandboxHost,
    User,
)

from ..server.conftest import needs_namespaces

pytestmark = pytest.mark.anyio

ACCOUNT = Owner("acct_test")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["process", pytest.param("namespaces", marks=needs_namespaces)])
async def swarms(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Swarms]:
    """A server's domain with 4 GiB to book (its test serves it in its own task group)."""
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state", request.param))
    try:
        yield assemble(store, host, Settings(4))
    finally:
        gc.unfreeze()
        await host.aclose()
        host.reap_leftovers()
        host.cgroups.remove_base()
        store.close()


async def _start_sandbox(swarms: Swarms) -> LongLivedSandbox:
    return await swarms.start_sandbox(ACCOUNT, SandboxSpec("base", Size(1, 1), 60))


async def _start_command(
    swarms: Swarms, service: ProcessService, argv: list[str]
) -> tuple[LongLivedSandbox, Command]:
    box = await _start_sandbox(swarms)
    process = await box.sandbox.exec(argv, box.env)
    config = pb.ProcessConfig(cmd=argv[0], args=argv[1:])
    command = Command(box, process, config, None, False, service.commands(box))
    swarms.sandboxes.start_soon(command.run)
    return box, command


async def test_a_stopping_server_ends_sandboxes_with_commands_running(swarms: Swarms) -> None:
    # the command's task and the sandbox's end at once: the sandbox's kills and waits for it
    service = ProcessService(Envd(swarms.sandboxes))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(swarms.serve)
            box, command = await _start_command(swarms, service, ["sleep", "60"])
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    assert box.ended.is_set() and command.process.returncode == -signal.SIGKILL
    record = swarms.store.long_lived(box.id, ACCOUNT)
    assert record is not None and record.end_reason == "server stopped"


def _start_context(
    box: LongLivedSandbox, user: str
) -> RequestContext[pb.StartRequest, pb.StartResponse]:
    start = MethodInfo(
        name="Start",
        service_name="process.Process",
        input=pb.StartRequest,
        output=pb.StartResponse,
        idempotency_level=IdempotencyLevel.UNKNOWN,
    )
    headers = Headers(
        {
            "e2b-sandbox-id": box.id,
            "x-access-token": box.token,
            "authorization": "Basic " + base64.b64encode(f"{user}:".encode()).decode(),
        }
    )
    return RequestContext(method=start, http_method="POST", request_headers=headers)


@needs_namespaces
@pytest.mark.parametrize("swarms", ["namespaces"], indirect=True)
@pytest.mark.parametrize("user", ["root", "user"])
async def test_a_sandbox_ends_with_its_pid_1_and_a_command_it_could_not_start_fails(
    swarms: Swarms, user: str
) -> None:
    service = ProcessService(Envd(swarms.sandboxes))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(swarms.serve)
            box = await _start_sandbox(swarms)
            sandbox = box.sandbox
            assert isinstance(sandbox, NamespaceSandbox)
            # PID 1 killed from outside (it ignores what the sandbox could send it), and gone
            # before the server's event loop runs again
            signal.pidfd_send_signal(sandbox.init_fd, signal.SIGKILL)
            select.select([sandbox.init_fd], [], [], 10)
            # a command asked for at that moment: the sandbox ended before it started
            request = pb.StartRequest(process=pb.ProcessConfig(cmd="true"))
            with pytest.raises(ConnectError) as refused:
                async for _ in service.start(request, _start_context(box, user)):
                    pass
            assert refused.value.code == Code.UNAVAILABLE
            assert refused.value.message == f"sandbox {box.id} has ended"
            await box.ended.wait()  # and the server saw it end
            tg.cancel_scope.cancel()
    assert swarms.sandboxes.live(box.id) is None
    record = swarms.store.long_lived(box.id, ACCOUNT)
    assert record is not None and record.end_reason == "init ended"
    swarms.engine.book(Size(1, 4))  # its memory was given back


@needs_namespaces
@pytest.mark.parametrize("swarms", ["namespaces"], indirect=True)
async def test_a_commands_user_is_looked_up_off_the_event_loop(
    swarms: Swarms, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sandbox's /etc/passwd is read as its root, on a thread of the file layer's: the
    # event loop would wait for it, every request with it
    loop, looked_up = threading.get_ident(), set[int]()
    lookup = Sandbox.user

    def user(sandbox: Sandbox, name: str) -> User:
        looked_up.add(threading.get_ident())
        return lookup(sandbox, name)

    monkeypatch.setattr(Sandbox, "user", user)
    service = ProcessService(Envd(swarms.sandboxes))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(swarms.serve)
            box = await _start_sandbox(swarms)
            request = pb.StartRequest(process=pb.ProcessConfig(cmd="true"))
            started = service.start(request, _start_context(box, "user"))
            events = [response.event.event.field async for response in started]  # type: ignore[union-attr]
            tg.cancel_scope.cancel()
    assert events[0] == "start" and events[-1] == "end"
    assert looked_up and loop not in looked_up


async def test_a_boot_or_an_end_that_fails_unexpectedly_leaves_the_books_right(
    swarms: Swarms, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: SandboxHost, sandbox_id: str, limits: Limits) -> Sandbox:
        raise RuntimeError("a fault of no known kind")

    async def unclosable(self: Sandbox) -> None:
        raise RuntimeError("it would not close")

    engine = swarms.engine
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(swarms.serve)
            with monkeypatch.context() as patched:
                patched.setattr(SandboxHost, "_create", broken)
                with pytest.raises(RuntimeError, match="no known kind"):
                    await _start_sandbox(swarms)
            assert engine.booked_gb == 0  # the memory went back
            box = await _start_sandbox(swarms)
            monkeypatch.setattr(type(box.sandbox), "close", unclosable)
            # kill() waits for the sandbox's end, which is recorded all the same
            await swarms.kill_sandbox(box.id, ACCOUNT)
            tg.cancel_scope.cancel()
    assert engine.booked_gb == 0
    assert swarms.store.long_lived(box.id, ACCOUNT).ended_at is not None  # type: ignore[union-attr]
