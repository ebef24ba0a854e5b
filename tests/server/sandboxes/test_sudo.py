"""`sudo` in a namespace sandbox: PID 1 starts root's commands for the sandbox's user."""

from __future__ import annotations

import pwd
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from inspect_swarm.server.engines._command import follow
from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import (
    IsolationConfig,
    NamespaceSandbox,
    Sandbox,
    SandboxHost,
)
from inspect_swarm.server.sandboxes._sudo import SOCKET, Refused, parse, request

from ...servers import needs_namespaces

LIMITS = Limits(2**30, 1)


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[NamespaceSandbox]:
    host = SandboxHost(IsolationConfig(tmp_path / "state"))
    host.reap_leftovers()
    box = await host.create("sbx-sudo", LIMITS)
    assert isinstance(box, NamespaceSandbox)
    yield box
    await box.close()
    await host.aclose()
    host.reap_leftovers()
    host.cgroups.remove_base()


async def _run(sandbox: Sandbox, command: str, user: str = "user") -> tuple[int, str, str]:
    tails = {"stdout": bytearray(), "stderr": bytearray()}
    process = await sandbox.exec(["/bin/sh", "-c", command], {}, None, sandbox.user(user))
    code = await follow(process, tails)
    sandbox.forget(process)
    return code, tails["stdout"].decode(), tails["stderr"].decode()


@needs_namespaces
@pytest.mark.anyio
async def test_the_user_runs_commands_as_root_with_their_stdio_and_exit_code(
    sandbox: NamespaceSandbox,
) -> None:
    assert await _run(sandbox, "sudo id -u; id -u") == (0, f"0\n{sandbox.user('user').uid}\n", "")
    assert await _run(sandbox, "echo hi | sudo cat; sudo sh -c 'echo err >&2; exit 3'") == (
        3,
        "hi\n",
        "err\n",
    )
    assert (await _run(sandbox, "sudo -n true && sudo -- true && sudo -u root -E true"))[0] == 0
    # a closed stdin is /dev/null for the command
    assert await _run(sandbox, "sudo cat <&-; echo $?") == (0, "0\n", "")


@needs_namespaces
@pytest.mark.anyio
async def test_sudo_keeps_the_directory_and_sets_roots_environment(
    sandbox: NamespaceSandbox,
) -> None:
    script = "cd /tmp && FOO=bar sudo sh -c 'echo $PWD $HOME $USER $SUDO_USER ${FOO:-none}'"
    assert (await _run(sandbox, script))[1] == "/tmp /root root user none\n"
    kept = "cd /tmp && FOO=bar sudo -E sh -c 'echo $HOME ${FOO:-none}'"
    assert (await _run(sandbox, kept))[1] == "/home/user bar\n"
    assert (await _run(sandbox, "sudo X=1 sh -c 'echo $X'"))[1] == "1\n"
    login = "cd /tmp && echo 'pwd; id -un' | sudo -i"
    assert (await _run(sandbox, login))[1] == "/root\nroot\n"
    assert (await _run(sandbox, "sudo -s -- echo 'a b'"))[1] == "a b\n"
    assert (await _run(sandbox, "cd /tmp && sudo -u user id -un", user="root"))[1] == "user\n"
    # a directory the account may not enter stops its command, as the server's would
    assert (await _run(sandbox, "sudo -u user true", user="root"))[0] == 125


@needs_namespaces
@pytest.mark.anyio
async def test_an_unsupported_option_is_refused_naming_it(sandbox: NamespaceSandbox) -> None:
    code, out, err = await _run(sandbox, "sudo -l")
    assert (code, out) == (1, "")
    assert err == "sudo: option -l is not supported by this sandbox's sudo (see sudo -h)\n"


@needs_namespaces
@pytest.mark.anyio
async def test_sudo_passes_its_signals_on_and_ends_as_the_command_did(
    sandbox: NamespaceSandbox,
) -> None:
    # the root command writes its pid, waits for SIGTERM (its group gets it), and says so
    script = (
        'sudo sh -c \'trap "echo got TERM; exit 7" TERM; echo $$ > /tmp/root_pid;'
        " while :; do sleep 0.05; done' & pid=$!;"
        " while [ ! -s /tmp/root_pid ]; do sleep 0.05; done; kill -TERM $pid; wait $pid"
    )
    assert (await _run(sandbox, script))[:2] == (7, "got TERM\n")
    # a command killed by a signal ends sudo by the same signal
    assert (await _run(sandbox, "sudo sh -c 'kill -KILL $$'; echo $?"))[1] == "137\n"


@needs_namespaces
@pytest.mark.anyio
async def test_a_command_outlives_no_sudo_killed_before_it(sandbox: NamespaceSandbox) -> None:
    script = (
        "sudo sh -c 'echo $$ > /tmp/root_pid; exec sleep 1000' & pid=$!;"
        " while [ ! -s /tmp/root_pid ]; do sleep 0.05; done; kill -KILL $pid;"
        " root=$(cat /tmp/root_pid); while sudo kill -0 $root 2>/dev/null; do sleep 0.05; done;"
        " echo gone"
    )
    with anyio.fail_after(60):  # a safety net: it ends once the command is gone
        assert (await _run(sandbox, script))[1] == "gone\n"


@needs_namespaces
@pytest.mark.anyio
async def test_a_reset_sandbox_still_has_sudo(sandbox: NamespaceSandbox) -> None:
    assert (await _run(sandbox, "sudo touch /usr/changed && sudo id -u"))[1] == "0\n"
    await sandbox.reset("sbx-sudo-2")
    assert (await _run(sandbox, "ls /usr/changed; sudo id -u"))[1] == "0\n"


def test_options_combine_and_the_command_starts_at_the_first_other_argument() -> None:
    settings, assignments, command = parse(["-nEu", "root", "A=1", "ls", "-l"])
    assert (settings["user"], settings["preserve_env"]) == ("root", True)
    assert (assignments, command) == (["A=1"], ["ls", "-l"])
    assert parse(["--user=user", "--", "-x"])[0]["user"] == "user"
    assert parse(["--", "-x"])[2] == ["-x"]
    for refused, name in ((["-l"], "-l"), (["-nb"], "-b"), (["--list"], "--list")):
        with pytest.raises(Refused, match=f"option {name} is not supported"):
            parse(refused)
    with pytest.raises(Refused, match="cannot be used together"):
        parse(["-i", "-s"])


def test_a_request_without_a_command_or_shell_is_refused_with_the_usage() -> None:
    me = pwd.getpwuid(0)
    with pytest.raises(Refused, match=r"^usage: sudo"):
        request({"user": "root", "keep": []}, [], [], me, {}, "/")
    with pytest.raises(Refused, match="unknown user nobody-here"):
        request({"user": "nobody-here", "keep": []}, [], ["true"], me, {}, "/")


@needs_namespaces
@pytest.mark.anyio
async def test_a_process_outside_the_sandbox_is_refused(sandbox: NamespaceSandbox) -> None:
    # the host's root reaches the socket through /proc: not a process of the sandbox
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(f"/proc/{sandbox.init_pid}/root{SOCKET}")
        assert sock.recv(4096) == b"error: sudo serves only the processes of its sandbox"
