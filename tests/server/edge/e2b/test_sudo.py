"""`sudo` for the template's `user`, with the unmodified e2b SDK, sync and async: passwordless,
as E2B's is, with no set-user-ID file."""

from __future__ import annotations

import pytest
from e2b import AsyncSandbox, CommandExitException, PtySize, Sandbox

from .test_terminals import Screen

pytestmark = pytest.mark.usefixtures("e2b_env")


def test_the_user_runs_commands_as_root_with_the_sync_sdk() -> None:
    sbx = Sandbox.create()
    try:
        assert sbx.commands.run("id -u").stdout != "0\n"
        assert sbx.commands.run("sudo id -u").stdout == "0\n"
        assert sbx.commands.run("sudo -n true").exit_code == 0
        assert sbx.commands.run("echo hi | sudo cat").stdout == "hi\n"
        with pytest.raises(CommandExitException) as ended:
            sbx.commands.run("sudo sh -c 'echo out; echo err >&2; exit 3'")
        assert (ended.value.exit_code, ended.value.stdout, ended.value.stderr) == (
            3,
            "out\n",
            "err\n",
        )
        # root's changes are root's: a file only root may write
        sbx.commands.run("sudo sh -c 'echo made > /etc/made-by-sudo'")
        assert sbx.files.read("/etc/made-by-sudo") == "made\n"
        assert sbx.commands.run("stat -c %u /etc/made-by-sudo").stdout == "0\n"
    finally:
        sbx.kill()


def test_sudo_reads_the_commands_stdin_sent_with_the_sdk() -> None:
    sbx = Sandbox.create()
    try:
        handle = sbx.commands.run("sudo cat", background=True, stdin=True)
        sbx.commands.send_stdin(handle.pid, "piped through\n")
        sbx.commands.close_stdin(handle.pid)
        assert handle.wait().stdout == "piped through\n"
    finally:
        sbx.kill()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_the_user_runs_commands_as_root_with_the_async_sdk(anyio_backend: str) -> None:
    sbx = await AsyncSandbox.create()
    try:
        assert (await sbx.commands.run("sudo id -u")).stdout == "0\n"
        assert (await sbx.commands.run("sudo -n true")).exit_code == 0
        assert (await sbx.commands.run("echo hi | sudo -E cat")).stdout == "hi\n"
        with pytest.raises(CommandExitException) as ended:
            await sbx.commands.run("sudo sh -c 'exit 3'")
        assert ended.value.exit_code == 3
    finally:
        await sbx.kill()


_ROOT_SHELL = (
    # (typed, what the terminal then shows): a root shell on a terminal of its own, which
    # sudo relays to, ^C included
    (b"sudo -i\n", ""),
    (b"echo in-$(id -un)-$(pwd)-$(tty)\n", "in-root-/root-/dev/pts/1"),
    (b"sh -c 'echo sta\"\"rted; exec sleep 30'\n", "started"),
    (b"\x03", ""),
    # job control: the shell's monitor mode is on, a job stopped by ^Z is brought back
    (b"echo flags-${-//[^m]/}\n", "flags-m"),
    (b"sh -c 'echo sle\"\"eping; sleep 30'\n", "sleeping"),
    (b"\x1a", "Stopped"),
    (b'jobs; kill %1; echo ki""lled\n', "killed"),
    (b"stty size\n", "24 80"),
)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_sudo_on_a_terminal(anyio_backend: str) -> None:
    sbx = await AsyncSandbox.create()
    try:
        screen = Screen()
        term = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=screen.add)
        # what is typed while sudo relays goes to its command: the next waits for the prompt
        await sbx.pty.send_stdin(term.pid, b"sudo sh -c 'echo root-$(id -u)-$(tty)'\n")
        await screen.shows("$ ", after="root-0-/dev/pts/1")
        for typed, shown in _ROOT_SHELL:
            await sbx.pty.send_stdin(term.pid, typed)
            await screen.shows(shown)
        # a resize of the terminal reaches the root shell's
        await sbx.pty.resize(term.pid, PtySize(rows=30, cols=100))
        await sbx.pty.send_stdin(term.pid, b"stty size\n")
        await screen.shows("30 100")
        await sbx.pty.send_stdin(term.pid, b"exit 4\n")
        await screen.shows("$ ", after="logout")
        await sbx.pty.send_stdin(term.pid, b"echo after-$?-$(id -un)-$(tty)\n")
        await screen.shows("after-4-user-/dev/pts/0")
        await sbx.pty.send_stdin(term.pid, b"exit\n")
        await term.wait()
    finally:
        await sbx.kill()
