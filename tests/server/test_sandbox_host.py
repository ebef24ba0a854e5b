"""The sandbox layer on its own: the factory of namespace sandboxes, and joining cgroups."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server._cgroups import Cgroups, Limits, SandboxCgroup
from inspect_swarm.server._engine import _follow
from inspect_swarm.server._isolation import (
    IsolationConfig,
    NamespaceSandbox,
    Sandbox,
    SandboxError,
    SandboxHost,
    _answer,
    _remove_cgroup,
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


async def _run(sandbox: Sandbox, command: str) -> tuple[int, str]:
    tails = {"stdout": bytearray(), "stderr": bytearray()}
    code = await _follow(sandbox.exec(["/bin/sh", "-c", command], {}), tails)
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


async def test_pid_1_keeps_no_descriptor_of_the_factory(host: SandboxHost) -> None:
    sandbox = await host.create("sbx-fds", LIMITS)
    try:
        code, listing = await _run(sandbox, "ls /proc/1/fd; readlink /proc/1/fd/0")
    finally:
        await sandbox.close()
    assert code == 0
    assert listing.split() == ["0", "1", "2", "/dev/null"]


async def test_sandboxes_die_with_the_factory_and_the_next_boot_starts_another(
    host: SandboxHost,
) -> None:
    first = await host.create("sbx-first", LIMITS)
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


async def test_spawned_processes_join_their_cgroups_before_the_command(
    tmp_path: Path,
) -> None:
    cgroups = Cgroups.detect(f"inspect-swarm-test-{os.getpid()}")
    if cgroups.mode == "none":
        pytest.skip("no writable cgroups here")
    group = cgroups.create("sbx-joined", LIMITS)
    process = spawn(
        SpawnOptions(argv=["cat", "/proc/self/cgroup"], env={}, cgroup_procs=group.procs_files)
    )
    tails = {"stdout": bytearray(), "stderr": bytearray()}
    try:
        assert await _follow(process, tails) == 0
        joined = [line for line in tails["stdout"].decode().splitlines() if "sbx-joined" in line]
        assert joined and all(line.endswith("/sbx-joined") for line in joined)
        missing = tmp_path / "missing" / "cgroup.procs"
        failed = spawn(SpawnOptions(argv=["true"], env={}, cgroup_procs=[missing]))
        tails = {"stdout": bytearray(), "stderr": bytearray()}
        assert await _follow(failed, tails) == 125
        assert f"cannot join cgroup {missing}" in tails["stderr"].decode()
    finally:
        await _remove_cgroup(group)
        cgroups.remove_base()


@pytest.mark.parametrize(
    "lines", [["pid {pid}", "ready"], ["ready", "pid {pid}"], ["error: no overlay"]]
)
async def test_a_boot_answer_is_read_in_either_order(tmp_path: Path, lines: list[str]) -> None:
    # the keeper reports PID 1's pid while PID 1 reports ready: either may write first
    sandbox = NamespaceSandbox("sbx-order", tmp_path, SandboxCgroup("none", {}), LIMITS)
    read, write = os.pipe()
    os.write(write, "".join(f"{line}\n" for line in lines).format(pid=os.getpid()).encode())
    os.close(write)
    status = await _answer(read, sandbox)
    if lines[0].startswith("error"):
        assert (status, sandbox.init_fd) == ("error: no overlay", -1)
    else:
        assert (status, sandbox.init_pid) == ("ready", os.getpid())
        os.close(sandbox.init_fd)
