"""Terminals (`sandbox.pty`) with the unmodified e2b SDK, sync and async."""

from __future__ import annotations

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException, PtySize, Sandbox

pytestmark = pytest.mark.usefixtures("e2b_env")


class Screen:
    """What a terminal showed, and a way to wait until it shows a text."""

    def __init__(self) -> None:
        self.text = ""
        self._changed = asyncio.Event()

    def add(self, data: bytes) -> None:
        self.text += data.decode(errors="replace")
        self._changed.set()

    async def shows(self, text: str, after: str = "") -> None:
        """Wait until the terminal shows `text` (after the first `after`, if given)."""
        # the timeout is a safety net: the text comes, or the test has failed
        try:
            async with asyncio.timeout(30):
                while text not in self._since(after):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            pytest.fail(f"{text!r} never shown; the screen: {self.text!r}")

    def _since(self, after: str) -> str:
        at = self.text.find(after)
        return "" if at < 0 else self.text[at + len(after) :]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_an_interactive_shell_on_a_terminal_with_the_async_sdk(anyio_backend: str) -> None:
    sbx = await AsyncSandbox.create()
    try:
        screen = Screen()
        term = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=screen.add)
        # what is typed is echoed: each awaited text is one only the command prints
        await sbx.pty.send_stdin(term.pid, b"echo $((6*7))-$(id -un); tty; stty size\n")
        await screen.shows("24 80")
        assert "42-user" in screen.text and "/dev/pts/0" in screen.text

        await sbx.pty.resize(term.pid, PtySize(rows=30, cols=100))
        await sbx.pty.send_stdin(term.pid, b"stty size\n")
        await screen.shows("30 100")

        # ^C interrupts the command in the foreground: the terminal is the shell's own
        # (the command says it started once it is the foreground job, not before)
        await sbx.pty.send_stdin(term.pid, b"sh -c 'echo sta\"\"rted; exec sleep 30'\n")
        await screen.shows("started")
        await sbx.pty.send_stdin(term.pid, b"\x03")
        await sbx.pty.send_stdin(term.pid, b"echo after-$?\n")
        await screen.shows("after-130")

        # a second follower sees what comes from then on
        later = Screen()
        await sbx.pty.connect(term.pid, on_data=later.add)
        await sbx.pty.send_stdin(term.pid, b"echo ag''ain\n")
        await later.shows("again")
        assert "42-user" not in later.text

        await sbx.pty.send_stdin(term.pid, b"exit 3\n")
        with pytest.raises(CommandExitException) as ended:
            await term.wait()
        assert ended.value.exit_code == 3
    finally:
        await sbx.kill()


def test_a_terminal_with_its_user_directory_and_variables_then_killed_with_the_sync_sdk() -> None:
    sbx = Sandbox.create()
    try:
        term = sbx.pty.create(PtySize(rows=10, cols=40), user="root", cwd="/tmp", envs={"M": "x"})
        # the processes of a terminal are the sandbox's: its hostname, its cgroup
        typed = (
            b"echo $M-$(pwd)-$(id -un)-$TERM; echo $(hostname)+$(cat /proc/self/cgroup)+; exit\n"
        )
        sbx.pty.send_stdin(term.pid, typed)
        shown: list[bytes] = []
        assert term.wait(on_pty=shown.append).exit_code == 0
        text = b"".join(shown).decode()
        assert "x-/tmp-root-xterm-256color" in text
        cgroup = " ".join(sbx.commands.run("cat /proc/self/cgroup").stdout.split())
        assert f"{sbx.sandbox_id}+{cgroup}+" in text

        term = sbx.pty.create(PtySize(rows=10, cols=40))
        assert any(p.pid == term.pid for p in sbx.commands.list())
        assert sbx.pty.kill(term.pid)
        with pytest.raises(CommandExitException) as killed:
            term.wait()
        assert killed.value.exit_code == 137
        assert not sbx.pty.kill(term.pid)  # gone: nothing to kill
    finally:
        sbx.kill()
