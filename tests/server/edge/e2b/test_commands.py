"""Commands of long-lived sandboxes on the server's engine: a stopping server, a dead sandbox."""

from __future__ import annotations

import base64
import errno
import gc
import os
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
from inspect_swarm.server.domain._server import SwarmServer
from inspect_swarm.server.edge.e2b._envd import Envd
from inspect_swarm.server.edge.e2b._process_service import Command, ProcessService
from inspect_swarm.server.model._keys import Owner
from inspect_swarm.server.model._types import (
    HostExhausted,
    LongLivedRecord,
    NotFound,
    SandboxSpec,
    Settings,
    Size,
)
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import (
    IsolationConfig,
    NamespaceSandbox,
    Sandbox,
    SandboxError,
    SandboxHost,
    User,
)

from ....servers import needs_namespaces

pytestmark = pytest.mark.anyio

ACCOUNT = Owner("acct_test")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["process", pytest.param("namespaces", marks=needs_namespaces)])
async def domain(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SwarmServer]:
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


async def _start_sandbox(domain: SwarmServer) -> LongLivedSandbox:
    return await domain.start_sandbox(ACCOUNT, SandboxSpec("base", Size(1, 1), 60))


def _record(domain: SwarmServer, box: LongLivedSandbox) -> LongLivedRecord:
    """The record of a long-lived sandbox that has ended."""
    record = domain.sandbox(box.id, ACCOUNT)
    assert isinstance(record, LongLivedRecord)
    return record


def _booked_gib(domain: SwarmServer) -> int:
    """The memory booked on the account's lease, as the lease shows it."""
    lease = domain.state(ACCOUNT, "").lease
    assert lease is not None
    return lease.booked_gib


async def _start_command(
    domain: SwarmServer, service: ProcessService, argv: list[str]
) -> tuple[LongLivedSandbox, Command]:
    box = await _start_sandbox(domain)
    process = await box.sandbox.exec(argv, box.env)
    config = pb.ProcessConfig(cmd=argv[0], args=argv[1:])
    command = Command(box, process, config, None, False, service.commands(box))
    domain.start_soon(command.run)
    return box, command


async def test_a_stopping_server_ends_sandboxes_with_commands_running(domain: SwarmServer) -> None:
    # the command's task and the sandbox's end at once: the sandbox's kills and waits for it
    service = ProcessService(Envd(domain))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            box, command = await _start_command(domain, service, ["sleep", "60"])
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    assert box.ended.is_set() and command.process.returncode == -signal.SIGKILL
    assert _record(domain, box).end_reason == "server stopped"


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
@pytest.mark.parametrize("domain", ["namespaces"], indirect=True)
@pytest.mark.parametrize("user", ["root", "user"])
async def test_a_sandbox_ends_with_its_pid_1_and_a_command_it_could_not_start_fails(
    domain: SwarmServer, user: str
) -> None:
    service = ProcessService(Envd(domain))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            box = await _start_sandbox(domain)
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
    with pytest.raises(NotFound):
        domain.live_sandbox(box.id)
    assert _record(domain, box).end_reason == "init ended"
    assert _booked_gib(domain) == 0  # its memory was given back


@needs_namespaces
@pytest.mark.parametrize("domain", ["namespaces"], indirect=True)
async def test_a_commands_user_is_looked_up_off_the_event_loop(
    domain: SwarmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sandbox's /etc/passwd is read as its root, on a thread of the file layer's: the
    # event loop would wait for it, every request with it
    loop, looked_up = threading.get_ident(), set[int]()
    lookup = Sandbox.user

    def user(sandbox: Sandbox, name: str) -> User:
        looked_up.add(threading.get_ident())
        return lookup(sandbox, name)

    monkeypatch.setattr(Sandbox, "user", user)
    service = ProcessService(Envd(domain))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            box = await _start_sandbox(domain)
            request = pb.StartRequest(process=pb.ProcessConfig(cmd="true"))
            started = service.start(request, _start_context(box, "user"))
            events = [response.event.event.field async for response in started]  # type: ignore[union-attr]
            tg.cancel_scope.cancel()
    assert events[0] == "start" and events[-1] == "end"
    assert looked_up and loop not in looked_up


@pytest.mark.parametrize(
    ("failure", "resource"),
    [
        (SandboxError("/proc/sys/kernel/random/boot_id: Cannot allocate memory"), "memory"),
        (OSError(errno.EMFILE, os.strerror(errno.EMFILE)), "open files"),
        (SandboxError("cannot make the sandbox's disk: No space left on device"), "disk space"),
    ],
)
async def test_a_boot_the_machine_lacks_a_resource_for_is_refused_naming_it(
    domain: SwarmServer, monkeypatch: pytest.MonkeyPatch, failure: Exception, resource: str
) -> None:
    async def short(
        self: SandboxHost, sandbox_id: str, limits: Limits, snapshot: str | None
    ) -> Sandbox:
        raise failure

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            monkeypatch.setattr(SandboxHost, "_create", short)
            with pytest.raises(HostExhausted, match=f"short of {resource} \\(") as refused:
                await _start_sandbox(domain)
            assert str(failure) in refused.value.message
            assert _booked_gib(domain) == 0
            monkeypatch.undo()
            box = await _start_sandbox(domain)  # once the machine has it again, a boot works
            await domain.kill_sandbox(box.id, ACCOUNT)
            tg.cancel_scope.cancel()


async def test_a_boot_or_an_end_that_fails_unexpectedly_leaves_the_books_right(
    domain: SwarmServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(
        self: SandboxHost, sandbox_id: str, limits: Limits, snapshot: str | None
    ) -> Sandbox:
        raise RuntimeError("a fault of no known kind")

    async def unclosable(self: Sandbox) -> None:
        raise RuntimeError("it would not close")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            with monkeypatch.context() as patched:
                patched.setattr(SandboxHost, "_create", broken)
                with pytest.raises(RuntimeError, match="no known kind"):
                    await _start_sandbox(domain)
            assert _booked_gib(domain) == 0  # the memory went back
            box = await _start_sandbox(domain)
            monkeypatch.setattr(type(box.sandbox), "close", unclosable)
            # kill() waits for the sandbox's end, which is recorded all the same
            await domain.kill_sandbox(box.id, ACCOUNT)
            tg.cancel_scope.cancel()
    assert _booked_gib(domain) == 0
    assert _record(domain, box).ended_at is not None
