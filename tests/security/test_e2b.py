"""Attacks on what the E2B surface adds to a sandbox: terminals, watches, files by URL.

Played with the unmodified e2b SDK, as a user of one sandbox who goes after another's.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ..server.conftest import OTHER_KEY, Server, point_e2b_at

e2b = pytest.importorskip("e2b")


@pytest.fixture
def two(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[e2b.Sandbox, e2b.Sandbox]]:
    """Two sandboxes: the victim's and the attacker's."""
    point_e2b_at(server, monkeypatch)
    victim = e2b.Sandbox.create()
    attacker = e2b.Sandbox.create()
    yield victim, attacker
    attacker.kill()
    victim.kill()


def test_a_terminal_is_reached_only_through_its_own_sandbox(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    term = victim.pty.create(e2b.PtySize(rows=24, cols=80))
    # its pid named through another sandbox: that sandbox's processes, none of them it
    with pytest.raises(e2b.NotFoundException):
        attacker.pty.send_stdin(term.pid, b"touch /tmp/owned\n")
    with pytest.raises(e2b.NotFoundException):
        attacker.pty.resize(term.pid, e2b.PtySize(rows=1, cols=1))
    assert not attacker.pty.kill(term.pid)
    # the victim's sandbox named with the attacker's access token, or another account's key
    headers = {"E2b-Sandbox-Id": victim.sandbox_id, "Content-Type": "application/json"}
    for token in (str(attacker._envd_access_token), ""):
        answer = httpx.post(
            f"{server.url}/process.Process/SendInput",
            json={"process": {"pid": term.pid}, "input": {"pty": "aWQK"}},
            headers={**headers, "X-Access-Token": token},
        )
        assert answer.status_code == 401, answer.text
    with pytest.raises(e2b.SandboxException):
        e2b.Sandbox.connect(victim.sandbox_id, api_key=OTHER_KEY)
    # a sandbox's terminals are its own devpts: the attacker sees none of the victim's
    assert attacker.commands.run("ls /dev/pts").stdout.split() == ["ptmx"]
    own = attacker.pty.create(e2b.PtySize(rows=24, cols=80))
    assert attacker.commands.run("ls /dev/pts").stdout.split() == ["0", "ptmx"]
    assert victim.pty.kill(term.pid) and attacker.pty.kill(own.pid)
    assert not victim.files.exists("/tmp/owned")
    # its own key still reaches it
    assert e2b.Sandbox.connect(victim.sandbox_id).sandbox_id == victim.sandbox_id
