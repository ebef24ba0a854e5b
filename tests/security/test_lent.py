"""Attacks from inside a sandbox on what the host lends it: files of a lent directory that only
root may read, read by root in the sandbox, and the host's paths, read from the sandbox's
mountinfo and PID 1's command line.

What not every user of the host may read stays unreadable inside, for root too; nothing a
sandbox can read names where the server keeps its state or runs from.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..servers import Server
from .conftest import in_sandbox, served


@pytest.fixture(scope="module")
def lent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A host directory with a file every user may read, and a secret in a file and a
    directory only root may read; and the secret."""
    secret = secrets.token_hex(16)
    top = tmp_path_factory.mktemp("lent") / "tools"
    (top / "private").mkdir(parents=True)
    (top / "open.txt").write_text("open\n")
    (top / "key.pem").write_text(secret)
    (top / "private" / "notes").write_text(secret)
    for path, mode in [(top, 0o755), (top / "open.txt", 0o644), (top / "key.pem", 0o600)]:
        path.chmod(mode)
    (top / "private").chmod(0o700)
    yield top, secret


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, lent: tuple[Path, str]) -> Iterator[Server]:
    """A server that exposes the lent directory at /opt/tools."""
    top, _ = lent
    yield from served(
        tmp_path_factory, "lending", "--memory-gib", "4", "--expose", f"{top}:/opt/tools"
    )


def test_what_only_roots_may_read_on_the_host_root_in_a_sandbox_may_not_either(
    server: Server, lent: tuple[Path, str]
) -> None:
    _, secret = lent
    # root in the sandbox has CAP_DAC_OVERRIDE and CAP_FOWNER: it may read any file it is
    # shown, and chmod one first
    script = (
        "id -u; cat /opt/tools/open.txt; cat /opt/tools/key.pem; ls -A /opt/tools/private; "
        "cat /opt/tools/private/notes; chmod 644 /opt/tools/key.pem; cat /opt/tools/key.pem; "
        "cat /usr/share/polkit-1/rules.d/* 2>&1 | head -c 200; true"
    )
    record = in_sandbox(server, script)
    out, err = str(record["stdoutTail"]), str(record["stderrTail"])
    assert record["status"] == "succeeded", record
    assert out.startswith("0\nopen\n")  # root, and what every user may read is there
    assert secret not in out + err


def test_the_sandbox_sees_no_host_path_in_its_mountinfo_or_pid_1s_command_line(
    server: Server,
) -> None:
    record = in_sandbox(
        server, "cat /proc/self/mountinfo; echo; tr '\\0' ' ' < /proc/1/cmdline; echo"
    )
    seen = str(record["stdoutTail"])
    assert record["status"] == "succeeded", record
    assert "overlay" in seen  # the root's layers are listed, by names of their own
    # (an exposed directory's mount names its place on its file system, as every bind
    # mount does: the operator chose to lend it)
    host = [str(server.state_dir), sys.executable, str(Path(__file__).parents[2])]
    assert [path for path in host if path in seen] == []
    assert seen.splitlines()[-1].strip() == "init"


@pytest.mark.skipif(os.geteuid() != 0, reason="root's files")
def test_the_host_still_reads_its_own(lent: tuple[Path, str]) -> None:
    top, secret = lent
    assert (top / "key.pem").read_text() == secret  # nothing was changed on the host
