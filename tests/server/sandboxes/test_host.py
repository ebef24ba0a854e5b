"""The sandbox layer on its own: the factory, PID 1 and its commands, cgroups, forwarding."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server.engines._command import follow
from inspect_swarm.server.sandboxes import _files as _sandbox_files
from inspect_swarm.server.sandboxes._cgroups import Cgroups, Limits, SandboxCgroup, default_pids_cap
from inspect_swarm.server.sandboxes._child_process import SpawnOptions, spawn
from inspect_swarm.server.sandboxes._forward import Forwarder
from inspect_swarm.server.sandboxes._init import _command_filter, _copy
from inspect_swarm.server.sandboxes._isolation import (
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
from inspect_swarm.server.sandboxes._terminal import TerminalSize

from ...servers import needs_namespaces

pytestmark = [needs_namespaces, pytest.mark.anyio]

LIMITS = Limits(2**30, 1)


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
    code = await follow(process, tails)
    sandbox.forget(process)
    return code, tails["stdout"].decode() + tails["stderr"].decode()


def _factories() -> list[int]:
    """This process's children that are the sandbox factory."""
    pid = os.getpid()
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [
        int(child)
        for child in children
        if b"sandboxes/_init.py" in Path(f"/proc/{child}/cmdline").read_bytes()
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
    root, user = sandbox.user("root"), sandbox.user("user")
    outcomes = []
    for argv, cwd, who in [
        (["no-such-program"], "/", root),
        (["/etc/passwd"], "/", root),
        (["true"], "/nowhere", root),
        (["true"], "/root", user),  # root may enter it, the user may not
        (["true"], "/root/..", user),
    ]:
        tails = {"stdout": bytearray(), "stderr": bytearray()}
        process = await sandbox.exec(argv, {}, cwd, who)
        outcomes.append((await follow(process, tails), tails["stderr"].decode()))
        sandbox.forget(process)
    assert outcomes == [
        (127, "no-such-program: No such file or directory\n"),
        (126, "/etc/passwd: Permission denied\n"),
        (125, "cannot change directory to '/nowhere': No such file or directory\n"),
        (125, "cannot change directory to '/root': Permission denied\n"),
        (125, "cannot change directory to '/root/..': Permission denied\n"),
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


async def test_ending_a_sandbox_fails_the_commands_still_waiting_to_be_sent(
    host: SandboxHost,
) -> None:
    sandbox = await host.create("sbx-backlog", LIMITS)
    assert isinstance(sandbox, NamespaceSandbox) and sandbox.control is not None
    # a PID 1 that does not read its requests, and little room for them: sends must wait
    os.kill(sandbox.init_pid, signal.SIGSTOP)
    sandbox.control.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
    failures: list[str] = []

    async def run() -> None:
        with pytest.raises(SandboxError) as raised:
            await sandbox.exec(["true"], {}, "/", sandbox.user("root"))
        failures.append(str(raised.value))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            try:
                for _ in range(20):
                    tg.start_soon(run)
                await anyio.wait_all_tasks_blocked()
            finally:
                await sandbox.close()
    assert any(f"sandbox {sandbox.id} has ended" == failure for failure in failures)
    assert all("ended" in failure for failure in failures)


async def test_the_sandboxs_root_cannot_end_its_pid_1(sandbox: NamespaceSandbox) -> None:
    # a signal reaches a namespace's init from inside only if it handles it: python does SIGINT
    code, _ = await _run(sandbox, "kill -INT 1; kill -TERM 1; kill -HUP 1; sleep 0.2")
    assert code == 0
    assert await _run(sandbox, "trap - INT; kill -INT $$; echo not reached") == (-signal.SIGINT, "")


def _take_pid(pid: int) -> subprocess.Popen[bytes] | None:
    """A host process with the pid `pid` (free now), if others fork in between rarely."""
    for _ in range(50):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        process = subprocess.Popen(["sleep", "60"])
        if process.pid == pid:
            return process
        process.kill()
        process.wait()
    return None


async def test_a_sandbox_whose_pid_1_ended_never_reaches_files_through_its_pid(
    host: SandboxHost,
) -> None:
    # once PID 1 is gone, its pid may be a host process's, whose root is the host's
    sandbox = await host.create("sbx-ended", LIMITS)
    assert isinstance(sandbox, NamespaceSandbox)
    marker = host.sandbox_dir.parent / "host-only"  # the state directory is masked inside
    await anyio.Path(marker).write_text("host")
    try:
        with pytest.raises(FileNotFoundError):
            sandbox.read_file(str(marker))
        signal.pidfd_send_signal(sandbox.init_fd, signal.SIGKILL)
        with anyio.fail_after(10):
            await anyio.wait_readable(sandbox.init_fd)
        impostor = _take_pid(sandbox.init_pid)
        if impostor is None:
            pytest.skip("could not give the pid to another process")
        try:
            with pytest.raises(ProcessLookupError, match=f"sandbox {sandbox.id} has ended"):
                sandbox.read_file(str(marker))
            with pytest.raises(ProcessLookupError):
                sandbox.write_file(str(marker), b"written through the sandbox")
        finally:
            impostor.kill()
            impostor.wait()
        assert await anyio.Path(marker).read_text() == "host"
    finally:
        await sandbox.close()


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


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A directory sandboxes see (theirs is a /tmp of their own)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as name:
        os.chmod(name, 0o755)
        yield Path(name)


async def test_masks_hide_what_symlinks_lead_to(
    host: SandboxHost, tmp_path: Path, outside_tmp: Path
) -> None:
    for name in ("one", "two/inner"):
        (outside_tmp / name).mkdir(parents=True)
        (outside_tmp / name / "key").write_text("secret")
    (outside_tmp / "to-one").symlink_to(outside_tmp / "one")
    (outside_tmp / "to-two").symlink_to("two")
    (outside_tmp / "two" / "open").write_text("exposed")
    masks = (str(outside_tmp / "to-one"), str(outside_tmp / "to-two" / "inner"))
    host.config = IsolationConfig(
        tmp_path / "state", masks=masks, exposes=((str(outside_tmp),) * 2,)
    )
    sandbox = await host.create("sbx-masked", LIMITS)
    try:
        paths = " ".join(f"{outside_tmp}/{p}/key" for p in ("one", "to-one", "two/inner"))
        code, output = await _run(sandbox, f"cat {paths} {outside_tmp}/to-two/inner/key")
        exposed = await _run(sandbox, f"cat {outside_tmp}/to-two/open")
    finally:
        await sandbox.close()
    assert code == 1 and "secret" not in output
    assert output.count("No such file or directory") == 4
    assert exposed == (0, "exposed")


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


async def test_boots_racing_to_replace_a_dead_factory_leave_one_that_the_host_ends(
    host: SandboxHost,
) -> None:
    await (await host.create("sbx-warm", LIMITS)).close()
    (factory,) = _factories()
    dead = os.pidfd_open(factory)
    os.kill(factory, signal.SIGKILL)
    with anyio.fail_after(10):
        await anyio.wait_readable(dead)
    os.close(dead)
    boxes: list[Sandbox] = []

    async def boot(name: str) -> None:
        boxes.append(await host.create(name, LIMITS))

    async with anyio.create_task_group() as tg:
        for name in ("sbx-race1", "sbx-race2"):
            tg.start_soon(boot, name)
    try:
        names = sorted([(await _run(box, "hostname"))[1] for box in boxes])
        assert names == ["sbx-race1\n", "sbx-race2\n"]
        (replacement,) = _factories()
    finally:
        for box in boxes:
            await box.close()
    await host.aclose()
    assert not await anyio.Path(f"/proc/{replacement}").exists()  # ended and reaped


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
            assert await _answer(sandbox) == {}  # no descriptor sent
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


async def test_a_cancelled_boot_still_takes_pid_1s_handle_to_end_it(tmp_path: Path) -> None:
    # the factory may have forked PID 1 already: without its pidfd, closing the sandbox could
    # not end it, and PID 1 would go on to make the sandbox's directory and join its cgroups
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    sandbox = NamespaceSandbox(
        "sbx-cancelled", tmp_path, Cgroups("none", {}), SandboxCgroup("none", {}), LIMITS
    )
    sandbox.control = ours

    async def cancelled_boot() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await _answer(sandbox)

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancelled_boot)
                await anyio.wait_all_tasks_blocked()
                pidfd = os.pidfd_open(os.getpid())
                socket.send_fds(theirs, [b"started"], [pidfd])
                os.close(pidfd)
        assert sandbox.init_pid == os.getpid()
    finally:
        if sandbox.init_fd >= 0:
            os.close(sandbox.init_fd)
        ours.close()
        theirs.close()


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


async def test_a_sandbox_has_at_most_its_pids_limit_of_processes(host: SandboxHost) -> None:
    if host.cgroups.mode == "none":
        pytest.skip("no writable cgroups here")
    sandbox = await host.create("sbx-pids", Limits(2**30, 1, pids=16))
    try:
        _, output = await _run(sandbox, "for i in $(seq 30); do sleep 5 & done")
        assert 10 < len(sandbox.cgroup.pids()) <= 16  # PID 1 and the sleeps that started
    finally:
        await sandbox.close()
    assert "Cannot fork" in output


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
        assert await follow(process, tails) == 0
        name = group.procs_files[0].parent.name
        joined = [line for line in tails["stdout"].decode().splitlines() if name in line]
        assert joined and all(line.endswith(f"/{name}") for line in joined)
        missing = tmp_path / "missing" / "cgroup.procs"
        failed = spawn(SpawnOptions(argv=["true"], env={}, cgroup_procs=[missing]))
        tails = {"stdout": bytearray(), "stderr": bytearray()}
        assert await follow(failed, tails) == 125
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


async def test_a_signal_reaches_a_command_while_pid_1_is_behind(
    sandbox: NamespaceSandbox,
) -> None:
    process = await sandbox.exec(["/bin/sleep", "1000"], {}, None, sandbox.user("root"))
    assert sandbox.control is not None
    signal.pidfd_send_signal(sandbox.init_fd, signal.SIGSTOP)
    try:
        # PID 1 stopped, its control socket fills with harmless requests (signal 0)
        while True:
            try:
                sandbox.control.send(f"signal {process.pid} 0".encode())
            except BlockingIOError:
                break
        process.signal(signal.SIGKILL)
    finally:
        signal.pidfd_send_signal(sandbox.init_fd, signal.SIGCONT)
    with anyio.fail_after(20):
        assert await process.wait() == -signal.SIGKILL
    sandbox.forget(process)


async def test_a_reset_makes_anew_what_a_command_changed_and_keeps_pid_1(
    sandbox: NamespaceSandbox,
) -> None:
    init_pid, layers = sandbox.init_pid, Path(f"/proc/self/fd/{sandbox.layer_fd}")
    upper = layers / "up"
    unchanged = upper.stat().st_ino
    await sandbox.reset("sbx-again")
    assert upper.stat().st_ino == unchanged  # a layer no command changed is kept
    await _run(sandbox, "touch /marker /tmp/marker; sleep 1000 >/dev/null 2>&1 &")
    await sandbox.reset("sbx-anew")
    assert sandbox.init_pid == init_pid
    assert upper.stat().st_ino != unchanged
    assert not [name for name in os.listdir(layers) if ".old" in name]  # the old ones removed
    _, out = await _run(sandbox, "ls /marker /tmp/marker; pgrep -c sleep; hostname")
    assert out.splitlines()[:2] == ["0", "sbx-anew"]  # stdout, then stderr
    assert out.count("No such file") == 2


async def test_a_reset_makes_a_used_network_anew_with_a_listener_in_it(
    tmp_path: Path, echo_server: tuple[str, int]
) -> None:
    host = SandboxHost(IsolationConfig(tmp_path / "state", forward=echo_server))
    host.reap_leftovers()
    sandbox = await host.create("sbx-net", LIMITS)
    assert isinstance(sandbox, NamespaceSandbox) and sandbox.listener is not None
    connect = (
        'python3 -c \'import socket; c = socket.create_connection(("127.0.0.1", '
        f'{echo_server[1]})); c.sendall(b"hi"); print(c.recv(9).decode())\''
    )
    try:
        first = sandbox.listener
        await sandbox.reset("sbx-quiet")  # nothing used the network: it stays
        assert sandbox.listener is first and first.fileno() >= 0
        assert (await _run(sandbox, connect))[1] == "HI\n"
        await sandbox.reset("sbx-used")
        assert sandbox.listener is not first and first.fileno() == -1
        assert (await _run(sandbox, f"ss -tan | grep -c TIME-WAIT; {connect}"))[1] == "0\nHI\n"
    finally:
        await sandbox.close()
        await host.aclose()
        host.cgroups.remove_base()


async def test_a_sandbox_whose_pid_1_ended_cannot_be_made_anew(
    sandbox: NamespaceSandbox,
) -> None:
    sandbox.kill_processes()
    await anyio.wait_readable(sandbox.init_fd)
    with pytest.raises(SandboxError, match="ended"):
        await sandbox.reset("sbx-never")


_ALLOW, _KILL, _EPERM, _ENOSYS = 0x7FFF0000, 0x80000000, 0x50000 | 1, 0x50000 | 38


def _filter_answer(
    program: list[tuple[int, int, int, int]], arch: int, call: int, arg0: int = 0, arg5: int = 0
) -> int:
    """What a classic-BPF seccomp program answers for a call (only the instructions it uses)."""
    words = {16: arg0 & 0xFFFFFFFF, 20: arg0 >> 32, 56: arg5 & 0xFFFFFFFF, 60: arg5 >> 32}
    data = {0: call, 4: arch, **words}  # struct seccomp_data
    pc, accumulator = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # load a word of seccomp_data
            accumulator = data[k]
        elif code == 0x05:  # jump
            pc += k
        elif code in (0x15, 0x35, 0x45):  # jump if equal, greater or equal, any bit set
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: accumulator & k}
            pc += jt if taken[code] else jf
        elif code == 0x06:  # return
            return k
        else:
            raise AssertionError(f"instruction {code:#x} is not one a seccomp program uses here")
        pc += 1


# machine, AUDIT_ARCH_* value, and calls' numbers in each architecture's table in that order
ARCHES = {
    "x86_64": ("x86_64", 0xC000003E),
    "i386": ("x86_64", 0x40000003),
    "aarch64": ("aarch64", 0xC00000B7),
    "riscv64": ("riscv64", 0xC00000F3),
}
CALLS = {
    # refused, as Docker's default profile refuses them
    "keyctl": (250, 288, 219, 219),
    "add_key": (248, 286, 217, 217),
    "bpf": (321, 357, 280, 280),
    "perf_event_open": (298, 336, 241, 241),
    "io_uring_setup": (425, 425, 425, 425),
    "io_uring_enter": (426, 426, 426, 426),
    "unshare": (272, 310, 97, 97),
    "setns": (308, 346, 268, 268),
    "mount": (165, 21, 40, 40),
    "open_by_handle_at": (304, 342, 265, 265),
    "userfaultfd": (323, 374, 282, 282),
    "kexec_load": (246, 283, 104, 104),
    "init_module": (175, 128, 105, 105),
    "fsopen": (430, 430, 430, 430),
    # allowed
    "getpid": (39, 20, 172, 172),
    "read": (0, 3, 63, 63),
    "ptrace": (101, 26, 117, 117),
    "chroot": (161, 61, 51, 51),
    # judged by their arguments
    "clone": (56, 120, 220, 220),
    "clone3": (435, 435, 435, 435),
    "personality": (135, 136, 92, 92),
    "socket": (41, 359, 198, 198),
}
REFUSED = list(CALLS)[:14]


@pytest.mark.parametrize("arch", list(ARCHES))
def test_commands_filter_refuses_what_dockers_default_profile_refuses(arch: str) -> None:
    (machine, code), column = ARCHES[arch], list(ARCHES).index(arch)
    program = _command_filter(machine)

    def answer(name: str, arg0: int = 0) -> int:
        return _filter_answer(program, code, CALLS[name][column], arg0)

    assert {name: answer(name) for name in REFUSED} == dict.fromkeys(REFUSED, _EPERM)
    assert [answer(name) for name in ("getpid", "read", "ptrace", "chroot")] == [_ALLOW] * 4
    # user (and every other) namespaces: not through clone's flags, clone3 not at all (ENOSYS:
    # the C library falls back to clone)
    assert answer("clone", 0x01200011) == _ALLOW  # fork's flags
    for flag in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x02000000):
        assert answer("clone", 0x01200011 | flag) == _EPERM
    assert answer("clone3") == _ENOSYS
    assert answer("personality", 0) == _ALLOW and answer("personality", 0xFFFFFFFF) == _ALLOW
    assert answer("personality", 0x0040000) == _EPERM  # ADDR_NO_RANDOMIZE
    assert answer("socket", 2) == _ALLOW and answer("socket", 10) == _ALLOW  # AF_INET(6)
    for family in (38, 40, 46, 1000):  # AF_ALG, AF_VSOCK, beyond AF_MAX
        assert answer("socket", family) == _EPERM
    # a call newer than the table: ENOSYS, as from an older kernel
    assert _filter_answer(program, code, 470) == _ENOSYS


PLACEHOLDER_KEY = 0x6B657932_6B657931  # the program's, until PID 1 puts its own key in


@pytest.mark.parametrize("arch", list(ARCHES))
def test_only_pid_1s_key_lets_the_calls_it_makes_a_sandbox_anew_with_through(arch: str) -> None:
    (machine, code), column = ARCHES[arch], list(ARCHES).index(arch)
    program = _command_filter(machine)
    native = arch != "i386"  # PID 1 runs as its machine's architecture

    def answer(name: str, arg0: int = 0, key: int = 0) -> int:
        return _filter_answer(program, code, CALLS[name][column], arg0, key)

    for name in ("mount", "setns", "unshare"):
        assert answer(name) == _EPERM
        assert answer(name, key=PLACEHOLDER_KEY ^ 1) == _EPERM
        assert answer(name, key=PLACEHOLDER_KEY) == (_ALLOW if native else _EPERM)
    assert answer("unshare", 0x10000000, PLACEHOLDER_KEY) == _EPERM  # never a user namespace
    assert answer("bpf", key=PLACEHOLDER_KEY) == _EPERM


def test_commands_filter_kills_calls_of_an_unknown_architecture_or_abi() -> None:
    assert _filter_answer(_command_filter("aarch64"), 0x40000028, 20) == _KILL  # 32-bit ARM
    assert _filter_answer(_command_filter("aarch64"), 0xC000003E, 39) == _KILL  # not aarch64
    x86_64 = _command_filter("x86_64")
    assert _filter_answer(x86_64, 0xC000003E, 0x40000000 | 39) == _KILL  # x32's getpid
    assert _filter_answer(x86_64, 0xC00000B7, 172) == _KILL


async def test_root_in_a_sandbox_has_no_keyrings(sandbox: NamespaceSandbox) -> None:
    # the kernel's keyrings are not namespaced: the host root's would be every sandbox's
    keyctl = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
    if keyctl is None:
        pytest.skip("keyctl's number on this architecture is not known here")
    # KEYCTL_GET_KEYRING_ID of KEY_SPEC_USER_KEYRING
    code, out = await _run(
        sandbox,
        "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        f"print(libc.syscall({keyctl}, 0, -4, 0), ctypes.get_errno())'",
    )
    assert (code, out) == (0, f"-1 {errno.EPERM}\n")


async def test_a_sandbox_has_its_own_cgroups_as_the_root_of_those_it_sees(
    sandbox: NamespaceSandbox,
) -> None:
    _, out = await _run(sandbox, "cat /proc/self/cgroup /proc/1/cgroup")
    assert out and all(line.endswith(":/") for line in out.splitlines())


def test_the_base_layer_copies_only_what_every_user_may_read(tmp_path: Path) -> None:
    source = tmp_path / "etc" / "ssl"
    (source / "private").mkdir(parents=True)
    (source / "private" / "key.pem").write_text("secret")
    (source / "private").chmod(0o700)
    (source / "certs").mkdir()
    (source / "certs" / "ca.pem").write_text("public")
    (source / "certs" / "own.pem").write_text("own")
    (source / "certs" / "own.pem").chmod(0o600)
    (source / "certs" / "link.pem").symlink_to("ca.pem")
    (tmp_path / "outside").write_text("followed")
    (source / "certs" / "out.pem").symlink_to(tmp_path / "outside")
    copy = tmp_path / "copy"
    _copy(str(source), str(copy), (str(source / "certs"),))
    assert sorted(p.name for p in copy.rglob("*")) == ["ca.pem", "certs", "link.pem", "out.pem"]
    assert (copy / "certs" / "link.pem").is_symlink()  # a link within what is kept stays one
    assert not (copy / "certs" / "out.pem").is_symlink()  # else what it leads to is copied
    assert (copy / "certs" / "out.pem").read_text() == "followed"
    info, original = (copy / "certs" / "ca.pem").stat(), (source / "certs" / "ca.pem").stat()
    assert (info.st_mode, info.st_mtime_ns) == (original.st_mode, original.st_mtime_ns)


async def test_the_server_reaches_a_sandboxs_files_only_as_its_processes_could(
    sandbox: NamespaceSandbox,
) -> None:
    user = sandbox.user("user")
    assert (await _run(sandbox, "echo root-only > /root-file; chmod 600 /root-file"))[0] == 0
    assert sandbox.read_file("/root-file") == b"root-only\n"  # root of the sandbox may
    with pytest.raises(PermissionError):
        sandbox.as_user(user, lambda root: _sandbox_files.read_file(root, "/root-file"))
    # PID 1's environment needs CAP_SYS_PTRACE, which no process of the sandbox has
    with pytest.raises(PermissionError):
        sandbox.read_file("/proc/1/environ")
    sandbox.write_file("/home/user/made", b"x", user)
    assert (await _run(sandbox, "stat -c %U /home/user/made"))[1] == "user\n"
    with pytest.raises(PermissionError):
        sandbox.write_file("/etc/made", b"x", user)


@pytest.fixture
async def small_disk(tmp_path: Path) -> AsyncIterator[SandboxHost]:
    host = SandboxHost(IsolationConfig(tmp_path / "state", disk_bytes=64 * 2**20))
    host.reap_leftovers()
    yield host
    await host.aclose()
    host.reap_leftovers()
    host.cgroups.remove_base()


async def test_a_sandbox_writes_no_more_than_its_disk_and_a_reset_gives_it_all_back(
    small_disk: SandboxHost,
) -> None:
    sandbox = await small_disk.create("sbx-disk", LIMITS)
    assert isinstance(sandbox, NamespaceSandbox)
    write = "head -c {}M /dev/zero > {} && echo written"
    try:
        code, out = await _run(sandbox, write.format(100, "/root/big"))
        assert code != 0 and "No space left on device" in out
        assert "No space left on device" in (await _run(sandbox, write.format(9, "/usr/big")))[1]
        assert sandbox.disk is not None
        image = sandbox.disk.stat()
        assert image.st_blocks * 512 <= 64 * 2**20  # on the host: no more than the disk
        await _run(sandbox, "rm /root/big")
        assert (await _run(sandbox, write.format(40, "/root/big")))[1] == "written\n"
        await sandbox.reset("sbx-disk-again")  # the layers it wrote on are removed first
        assert (await _run(sandbox, write.format(40, "/root/big")))[1] == "written\n"
        # a full disk has no room for new layers: the sandbox is ended (a new one booted)
        await _run(sandbox, write.format(100, "/root/more"))
        with pytest.raises(SandboxError, match="No space left on device"):
            await sandbox.reset("sbx-disk-full")
    finally:
        await sandbox.close()


async def test_all_sandboxes_processes_together_are_capped(tmp_path: Path) -> None:
    host = SandboxHost(IsolationConfig(tmp_path / "state", pids=40))
    if host.cgroups.mode == "none":
        pytest.skip("no writable cgroups here")
    host.reap_leftovers()
    boxes = [await host.create(f"sbx-many{i}", Limits(2**30, 1, pids=4096)) for i in (1, 2)]
    try:
        for box in boxes:
            await _run(box, "for i in $(seq 30); do sleep 5 & done")
        assert sum(len(box.cgroup.pids()) for box in boxes) <= 40
    finally:
        for box in boxes:
            await box.close()
        await host.aclose()
        host.reap_leftovers()
        host.cgroups.remove_base()


def test_the_default_caps_of_three_servers_leave_a_quarter_of_the_hosts_processes() -> None:
    limits = [int(Path(f"/proc/sys/kernel/{n}").read_text()) for n in ("pid_max", "threads-max")]
    assert 3 * default_pids_cap() <= 3 * min(limits) // 4


async def test_a_sandbox_has_the_hosts_system_accounts_only_and_a_user_no_host_id_has(
    sandbox: NamespaceSandbox,
) -> None:
    host_ids = {
        int(line.split(":")[2])
        for path in ("/etc/passwd", "/etc/group")
        for line in (await anyio.Path(path).read_text()).splitlines()
    }
    expected = next(uid for uid in range(1000, 65536) if uid not in host_ids)
    user = sandbox.user("user")
    assert (user.uid, user.gid) == (expected, expected)
    _, out = await _run(sandbox, "cat /etc/passwd /etc/group")
    lines = out.splitlines()
    assert any(line.startswith("root:x:0:") for line in lines)
    host = await anyio.Path("/etc/passwd").read_text()
    for entry in (line.split(":") for line in host.splitlines()):
        if 1000 <= int(entry[2]) < 60000:  # the host's users: none of the sandbox's
            assert not any(line.startswith(f"{entry[0]}:") for line in lines)


@pytest.mark.parametrize("mode", ["namespaces", "process"])
async def test_a_command_on_a_terminal_has_it_as_its_controlling_terminal(
    tmp_path: Path, mode: str
) -> None:
    host = SandboxHost(IsolationConfig(tmp_path / "state", mode))  # type: ignore[arg-type]
    host.reap_leftovers()
    box = await host.create("sbx-terminal", LIMITS)
    try:
        script = "trap 'echo resized' WINCH; stty size; read line; echo got-$line; while :; do sleep 0.1; done"
        user = box.user("user")
        process = await box.exec(
            ["/bin/sh", "-c", script], {}, None, user, True, TerminalSize(5, 20)
        )
        screen = b""
        output = process.chunks("stdout")
        assert [chunk async for chunk in process.chunks("stderr")] == []  # all on stdout

        async def shows(text: bytes) -> None:
            nonlocal screen
            with anyio.fail_after(30):  # a safety net
                while text not in screen:
                    screen += await anext(output)

        try:
            await shows(b"5 20")
        except StopAsyncIteration:
            pytest.fail(f"the terminal ended showing {screen!r}")
        await process.write_stdin(b"typed\n")
        await shows(b"got-typed")
        process.resize(TerminalSize(6, 30))  # SIGWINCH to the foreground group: the shell
        await shows(b"resized")
        process.signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL
        box.forget(process)
        plain = await box.exec(["true"], {}, None, user)
        with pytest.raises(ValueError, match="no terminal"):
            plain.resize(TerminalSize(1, 1))
        await plain.wait()
        box.forget(plain)
    finally:
        await box.close()
        await host.aclose()
        host.reap_leftovers()
        host.cgroups.remove_base()
