"""The sandbox layer on its own: the factory, PID 1 and its commands, cgroups, forwarding."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import struct
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server._cgroups import Cgroups, Limits, SandboxCgroup
from inspect_swarm.server._engine import _follow
from inspect_swarm.server._forward import Forwarder
from inspect_swarm.server._isolation import (
    _FS_IOC_GETFLAGS,
    _FS_TOPDIR_FL,
    IsolationConfig,
    NamespaceSandbox,
    Sandbox,
    SandboxError,
    SandboxHost,
    User,
    _answer,
)
from inspect_swarm.server._process import SpawnOptions, spawn

from .conftest import needs_namespaces

pytestmark = [needs_namespaces, pytest.mark.anyio]

LIMITS = Limits(2**30, 1)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[SandboxHost]:
    host = SandboxHost(IsolationConfig(tmp_path / "state"))
    host.reap_leftovers()
    yield host
    await host.aclose()
    host.reap_leftovers()
    host.cgroups.remove_base()


@pytest.fixture
async def sandbox(host: SandboxHost) -> AsyncIterator[NamespaceSandbox]:
    box = await host.create("sbx-commands", LIMITS)
    assert isinstance(box, NamespaceSandbox)
    yield box
    await box.close()


async def _run(
    sandbox: Sandbox, command: str, user: User | None = None, cwd: str | None = None
) -> tuple[int, str]:
    tails = {"stdout": bytearray(), "stderr": bytearray()}
    process = await sandbox.exec(["/bin/sh", "-c", command], {}, cwd, user or sandbox.user("root"))
    code = await _follow(process, tails)
    sandbox.forget(process)
    return code, tails["stdout"].decode() + tails["stderr"].decode()


def _factories() -> list[int]:
    """This process's children that are the sandbox factory."""
    pid = os.getpid()
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [
        int(child)
        for child in children
        if b"_sandbox_init.py" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


async def _ended(sandbox: NamespaceSandbox, pid: int) -> bool:
    """Whether a process of the sandbox has exited."""
    try:
        return "(zombie)" in await anyio.Path(f"{sandbox.root}/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def _open_files(pid: int) -> set[str]:
    """What the descriptors of a process lead to (sockets and pipes by inode)."""
    fds = Path(f"/proc/{pid}/fd")
    return {os.readlink(fds / fd) for fd in os.listdir(fds)}


async def test_commands_get_only_their_stdio_and_pid_1_nothing_of_the_factory(
    sandbox: NamespaceSandbox,
) -> None:
    code, listing = await _run(sandbox, "ls /proc/self/fd")
    assert (code, listing.split()) == (0, ["0", "1", "2", "3"])  # 3: ls reading the directory
    (factory,) = _factories()
    shared = _open_files(sandbox.init_pid) & _open_files(factory)
    assert shared <= {"/dev/null"}


async def test_commands_run_as_their_user_in_their_directory(sandbox: NamespaceSandbox) -> None:
    user = sandbox.user("user")
    code, output = await _run(sandbox, "id -u; id -g; pwd; grep CapEff /proc/self/status", user)
    assert code == 0
    assert output.split() == [str(user.uid), str(user.gid), user.home, "CapEff:", "0" * 16]
    code, output = await _run(sandbox, "id -u; pwd; grep CapEff /proc/self/status", cwd="/tmp")
    assert output.split()[:3] == ["0", "/tmp", "CapEff:"] and output.split()[3] != "0" * 16


async def test_a_command_that_cannot_start_says_why_as_a_shell_would(
    sandbox: NamespaceSandbox,
) -> None:
    root = sandbox.user("root")
    outcomes = []
    for argv, cwd in [(["no-such-program"], "/"), (["/etc/passwd"], "/"), (["true"], "/nowhere")]:
        tails = {"stdout": bytearray(), "stderr": bytearray()}
        process = await sandbox.exec(argv, {}, cwd, root)
        outcomes.append((await _follow(process, tails), tails["stderr"].decode()))
        sandbox.forget(process)
    assert outcomes == [
        (127, "no-such-program: No such file or directory\n"),
        (126, "/etc/passwd: Permission denied\n"),
        (125, "cannot change directory to '/nowhere': No such file or directory\n"),
    ]


async def test_signals_reach_the_commands_whole_process_group(sandbox: NamespaceSandbox) -> None:
    process = await sandbox.exec(
        ["/bin/sh", "-c", "sleep 60 & echo $!; wait"], {}, "/", sandbox.user("root")
    )
    chunks = process.chunks("stdout")
    child = int((await chunks.__anext__()).decode())
    assert 1 < process.pid < 100  # its pid inside the sandbox
    process.signal(signal.SIGTERM)
    with anyio.fail_after(10):
        assert await process.wait() == -signal.SIGTERM
    sandbox.forget(process)
    # the background child got it too: it ends (and PID 1 reaps it) moments later
    for _ in range(500):
        if await _ended(sandbox, child):
            break
        await anyio.sleep(0.02)
    assert await _ended(sandbox, child)


async def test_a_megabyte_of_arguments_goes_through(sandbox: NamespaceSandbox) -> None:
    chunk = "x" * 64 * 1024
    process = await sandbox.exec(["printf", "%s", *[chunk] * 16], {}, "/", sandbox.user("root"))
    output = b"".join([data async for data in process.chunks("stdout")])
    assert await process.wait() == 0
    assert output.decode() == chunk * 16
    sandbox.forget(process)


async def test_pid_1_ends_with_its_control_socket_and_then_commands_cannot_start(
    sandbox: NamespaceSandbox,
) -> None:
    init = os.pidfd_open(sandbox.init_pid)
    assert sandbox.control is not None
    sandbox.control.shutdown(socket.SHUT_RDWR)  # what the server's death does to it
    with anyio.fail_after(10):
        await anyio.wait_readable(init)
    os.close(init)
    with pytest.raises(SandboxError, match=r"has ended|cannot start"):
        await sandbox.exec(["true"], {}, "/", sandbox.user("root"))


async def test_the_user_comes_from_a_layer_that_sandboxes_copy_on_write(
    host: SandboxHost,
) -> None:
    first, second = [await host.create(f"sbx-layer{i}", LIMITS) for i in (1, 2)]
    try:
        assert "user:x:" in (await _run(first, "grep ^user: /etc/passwd"))[1]
        assert (await _run(first, "echo extra:x:5000:5000::/:/bin/sh >> /etc/passwd"))[0] == 0
        assert (await _run(first, "ls -ld /home/user"))[1].split()[2] == "user"
        assert "extra" in (await _run(first, "cat /etc/passwd"))[1]
        assert "extra" not in (await _run(second, "cat /etc/passwd"))[1]
        assert "extra:x:5000" not in await anyio.Path("/etc/passwd").read_text()
    finally:
        await first.close()
        await second.close()


async def test_sandboxes_die_with_the_factory_and_the_next_boot_starts_another(
    host: SandboxHost,
) -> None:
    first = await host.create("sbx-first", LIMITS)
    assert isinstance(first, NamespaceSandbox)
    init = os.pidfd_open(first.init_pid)
    (factory,) = _factories()
    os.kill(factory, signal.SIGKILL)
    with anyio.fail_after(10):
        await anyio.wait_readable(init)  # its PID 1, and with it the whole sandbox, died too
    os.close(init)
    await first.close()
    second = await host.create("sbx-second", LIMITS)
    try:
        assert (await _run(second, "hostname"))[1] == "sbx-second\n"
        assert len(_factories()) == 1 and _factories() != [factory]
    finally:
        await second.close()


async def test_a_boot_error_is_the_sandbox_error(host: SandboxHost, tmp_path: Path) -> None:
    host.config = IsolationConfig(tmp_path / "state", shares=(str(tmp_path / "missing"),))
    with pytest.raises(SandboxError, match="missing"):
        await host.create("sbx-broken", LIMITS)
    assert not (host.sandbox_dir / "sbx-broken").exists()


async def test_a_factory_that_cannot_prepare_refuses_every_boot_with_the_reason(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "base").write_text("not a directory")  # where the base layer would be mounted
    host = SandboxHost(IsolationConfig(state))
    host.reap_leftovers()
    try:
        for name in ("sbx-refused1", "sbx-refused2"):
            with pytest.raises(SandboxError, match="cannot prepare sandboxes"):
                await host.create(name, LIMITS)
        assert len(_factories()) == 1  # refusing, not dying
    finally:
        await host.aclose()
        host.reap_leftovers()
        host.cgroups.remove_base()


async def test_sandbox_directories_are_spread_over_the_disk(host: SandboxHost) -> None:
    try:
        fd = os.open(host.sandbox_dir, os.O_RDONLY | os.O_DIRECTORY)
        flags = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, b"\0" * 4))[0]
        os.close(fd)
    except OSError:
        pytest.skip("this filesystem has no inode flags")
    assert flags & _FS_TOPDIR_FL


@pytest.mark.parametrize(
    "replies", [["started", "ready"], ["started", "error: no overlay"], ["error: no dir"], []]
)
async def test_a_boot_answer_carries_pid_1_and_its_readiness_or_the_reason(
    tmp_path: Path, replies: list[str]
) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    sandbox = NamespaceSandbox(
        "sbx-answer", tmp_path, Cgroups("none", {}), SandboxCgroup("none", {}), LIMITS
    )
    sandbox.control = ours
    with theirs:
        for reply in replies:
            if reply == "started":
                socket.send_fds(theirs, [b"started"], [os.pidfd_open(os.getpid())])
            else:
                theirs.send(reply.encode())
    try:
        if replies[-1:] == ["ready"]:
            assert await _answer(sandbox) is None  # no listener asked for
        else:
            reason = replies[-1][7:] if replies else "init ended"
            with pytest.raises(SandboxError, match=reason):
                await _answer(sandbox)
        # PID 1's pidfd is kept either way, so that closing the sandbox can end it
        assert (sandbox.init_fd >= 0) == (replies[:1] == ["started"])
        assert sandbox.init_pid == (os.getpid() if replies[:1] == ["started"] else 0)
    finally:
        if sandbox.init_fd >= 0:
            os.close(sandbox.init_fd)
        ours.close()


async def test_ended_sandboxes_cgroups_serve_the_next_with_fresh_limits_and_oom_count(
    host: SandboxHost,
) -> None:
    if host.cgroups.mode == "none":
        pytest.skip("no writable cgroups here")
    small = Limits(64 * 2**20, 1)
    first = await host.create("sbx-hog", small)
    dirs = first.cgroup.procs_files
    code, _ = await _run(first, "python3 -c 'a = bytearray(256 * 1024**2)'")
    assert code != 0 and first.oom_killed()
    await first.close()
    # something changed the limit while the cgroup was idle: the next sandbox's is written again
    v2 = host.cgroups.mode == "v2"
    memory = dirs[0].parent if v2 else next(p.parent for p in dirs if "/memory/" in str(p))
    name = "memory.max" if v2 else "memory.limit_in_bytes"
    (memory / name).write_text(str(32 * 2**20))
    second = await host.create("sbx-next", small)
    try:
        assert second.cgroup.procs_files == dirs  # the same cgroups, reused
        assert int((memory / name).read_text()) == 64 * 2**20
        assert not second.oom_killed()  # the first one's kill is not counted
        assert (await _run(second, "true"))[0] == 0 and not second.oom_killed()
    finally:
        await second.close()
    other = await host.create("sbx-other", LIMITS)  # another size: other cgroups
    try:
        assert other.cgroup.procs_files != dirs
    finally:
        await other.close()
    for path in dirs:  # something removed the idle cgroups: the next sandbox gets new ones
        await anyio.Path(path.parent).rmdir()
    last = await host.create("sbx-last", small)
    try:
        assert last.cgroup.procs_files != dirs
        assert (await _run(last, "true"))[0] == 0
    finally:
        await last.close()


async def test_spawned_processes_join_their_cgroups_before_the_command(
    tmp_path: Path,
) -> None:
    cgroups = Cgroups.detect(f"inspect-swarm-test-{os.getpid()}")
    if cgroups.mode == "none":
        pytest.skip("no writable cgroups here")
    group = cgroups.create(LIMITS)
    process = spawn(
        SpawnOptions(argv=["cat", "/proc/self/cgroup"], env={}, cgroup_procs=group.procs_files)
    )
    tails = {"stdout": bytearray(), "stderr": bytearray()}
    try:
        assert await _follow(process, tails) == 0
        name = group.procs_files[0].parent.name
        joined = [line for line in tails["stdout"].decode().splitlines() if name in line]
        assert joined and all(line.endswith(f"/{name}") for line in joined)
        missing = tmp_path / "missing" / "cgroup.procs"
        failed = spawn(SpawnOptions(argv=["true"], env={}, cgroup_procs=[missing]))
        tails = {"stdout": bytearray(), "stderr": bytearray()}
        assert await _follow(failed, tails) == 125
        assert f"cannot join cgroup {missing}" in tails["stderr"].decode()
    finally:
        cgroups.remove_all()
        cgroups.remove_base()


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    """A server that answers every line with itself, upper-cased."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data.upper())

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()
    server.close()


def test_one_forwarder_passes_every_sandboxs_connections_on(echo_server: tuple[str, int]) -> None:
    forwarder = Forwarder(echo_server)
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    threads = threading.active_count()
    for listener in listeners:
        forwarder.add(listener)
    assert threading.active_count() == threads + 1  # one thread accepts for every sandbox
    clients = [
        socket.create_connection(listener.getsockname(), timeout=10) for listener in listeners
    ]
    try:
        for client, word in zip(clients, (b"one", b"two"), strict=True):
            client.sendall(word)
            assert client.recv(1024) == word.upper()
        forwarder.remove(listeners[0])  # that sandbox ended: its connection is cut
        assert clients[0].recv(1024) == b""
        clients[1].sendall(b"three")
        assert clients[1].recv(1024) == b"THREE"
    finally:
        for client in clients:
            client.close()
        forwarder.remove(listeners[1])
        forwarder.close()
