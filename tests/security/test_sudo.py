"""Attacks on `sudo`, played with the unmodified e2b SDK from inside sandboxes.

The sandbox's `user` gets root through sudo, which its caller had already (the API runs
commands as root), and nothing more: root's commands stay in the sandbox's namespaces,
cgroup and seccomp filter, lent files only the host's root may read stay unreadable, no other
account and no other sandbox reaches a sandbox's sudo, and no set-user-ID file acts anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from inspect_swarm.server.sandboxes._sudo import SOCKET

from ..servers import Server, point_e2b_at
from .conftest import served
from .test_lent import lent

e2b = pytest.importorskip("e2b")

__all__ = ["lent"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, lent: tuple[Path, str]) -> Iterator[Server]:
    """A server that lends a directory with a file only the host's root may read, and shares
    one."""
    top, _ = lent
    shared = tmp_path_factory.mktemp("shared")
    options = ("--memory-gib", "4", "--expose", f"{top}:/lent", "--share", str(shared))
    yield from served(tmp_path_factory, "sudo", *options)


@pytest.fixture
def sandbox(server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[e2b.Sandbox]:
    point_e2b_at(server, monkeypatch)
    sbx = e2b.Sandbox.create()
    yield sbx
    sbx.kill()


def _run(sbx: e2b.Sandbox, script: str, user: str = "user") -> tuple[int, str, str]:
    """Exit code, stdout and stderr of a shell script (failing or not)."""
    try:
        result = sbx.commands.run(script, user=user)
    except e2b.CommandExitException as ex:
        return ex.exit_code, ex.stdout, ex.stderr
    return result.exit_code, result.stdout, result.stderr


def test_only_the_sandboxs_own_user_and_root_reach_its_sudo(
    sandbox: e2b.Sandbox, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = e2b.Sandbox.create()
    try:
        # one socket in each sandbox, its own: what root of one does stays in it
        assert _run(other, "sudo touch /tmp/from-other && sudo id -u")[1] == "0\n"
        assert not sandbox.files.exists("/tmp/from-other")
        sockets = "sudo find / -path /proc -prune -o -path /sys -prune -o -type s -print"
        assert _run(sandbox, sockets)[1] == f"{SOCKET}\n"
    finally:
        other.kill()
    # another account of the sandbox, as root makes one with setpriv, or by sudo -u
    for script, user in (
        ("setpriv --reuid=65534 --regid=65534 --clear-groups sudo id -u", "root"),
        ("sudo -u nobody sudo id -u", "user"),
    ):
        code, out, err = _run(sandbox, script, user)
        assert (code, out) == (1, ""), err
        assert "uid 65534 may not use sudo" in err


def test_root_by_sudo_is_bounded_as_roots_commands_are(
    sandbox: e2b.Sandbox, lent: tuple[Path, str]
) -> None:
    _, secret = lent
    facts = (
        "cat /proc/self/cgroup; grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/self/status;"
        " readlink /proc/self/ns/*; tr '\\0' ' ' < /proc/1/cmdline; echo; hostname; cat /proc/self/limits"
    )
    as_root = _run(sandbox, facts, user="root")
    assert as_root[0] == 0 and "Seccomp:\t2" in as_root[1]
    by_sudo = _run(sandbox, f'sudo sh -c "{facts}"')
    assert by_sudo == as_root
    attempts = (
        "sudo mount -t tmpfs none /mnt",
        "sudo unshare -U true",
        "sudo umount /run/sudo",
        "sudo mknod /tmp/disk b 8 0",
        "sudo cat /lent/key.pem /lent/private/notes",
        "sudo chmod 644 /lent/key.pem",
    )
    for attempt in attempts:
        code, out, err = _run(sandbox, attempt)
        assert code != 0 and secret not in out + err, (attempt, out, err)


def test_neither_the_user_nor_root_can_replace_sudo_or_its_socket(sandbox: e2b.Sandbox) -> None:
    assert _run(sandbox, "stat -c '%u %g %a' /usr/bin/sudo /run/sudo")[1] == "0 0 755\n" * 2
    for script in (
        "rm -f /usr/bin/sudo",
        "cp /bin/true /usr/bin/sudo",
        f"mv {SOCKET} /tmp/socket",
        "ln -s /tmp /run/sudo/other",
        "sudo rm -f /usr/bin/sudo",
        "sudo cp /bin/true /usr/bin/sudo",
        f"sudo rm -f {SOCKET}",
        "sudo touch /run/sudo/other",
        "sudo mount --bind /bin/true /usr/bin/sudo",
    ):
        assert _run(sandbox, script)[0] != 0, script
    assert _run(sandbox, "sudo id -u && sudo -n true")[1] == "0\n"


_FLOOD = f"""
import socket, sys
held = []
for _ in range(100):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect("{SOCKET}")
    held.append(sock)
open("/tmp/held", "w").close()
sys.stdin.read()
"""


def test_a_flood_of_sudo_requests_leaves_pid_1_serving_the_server(sandbox: e2b.Sandbox) -> None:
    sandbox.files.write("/tmp/flood.py", _FLOOD)
    flood = sandbox.commands.run("python3 /tmp/flood.py", background=True, stdin=True)
    # once it holds them all, each has a process of its own waiting, up to the most, and the
    # next request is refused at once
    code, _, err = _run(sandbox, "until [ -e /tmp/held ]; do sleep 0.05; done; sudo true")
    assert code == 1 and err.rstrip().endswith("the most at once"), err
    # and PID 1 still starts the server's commands
    assert _run(sandbox, "echo alive", user="root") == (0, "alive\n", "")
    sandbox.commands.close_stdin(flood.pid)
    flood.wait()
    assert _run(sandbox, "until sudo true 2>/dev/null; do sleep 0.1; done; sudo id -u")[1] == "0\n"


_BAD_TERMINALS = f"""
import os, socket, struct
for asked in (b"sudo tty 99999999 -5", b"sudo tty 24", b"sudo tty x y", b"sudo tty 0 0 0"):
    request = os.memfd_create("request")
    os.write(request, b"\\0".join([b"root", b"0", b"0", b"/", b"1", b"true"]))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect("{SOCKET}")
    assert sock.recv(64) == b"go"
    fds = struct.pack("4i", request, 0, 1, 2)
    sock.sendmsg([asked], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    print(sock.recv(4096).decode().split(":")[0])
"""


def test_a_terminal_asked_for_with_a_bad_size_is_refused(sandbox: e2b.Sandbox) -> None:
    # a request for the command's own terminal that is not one: refused, and PID 1 serves on
    sandbox.files.write("/tmp/bad.py", _BAD_TERMINALS)
    assert _run(sandbox, "python3 /tmp/bad.py")[1].split() == ["error"] * 4
    assert _run(sandbox, "sudo id -u")[1] == "0\n"


def test_no_mount_of_a_sandbox_lets_a_set_user_id_file_act(sandbox: e2b.Sandbox) -> None:
    # every mount is nosuid, the share's too: the host's set-user-ID programs (passwd,
    # mount) and one root makes
    assert _run(sandbox, "awk '$4 !~ /(^|,)nosuid(,|$)/' /proc/self/mounts") == (0, "", "")
    setuid = "sudo sh -c 'cp /usr/bin/id /usr/local/bin/sid && chmod 4755 /usr/local/bin/sid'"
    assert _run(sandbox, setuid)[0] == 0
    uid = _run(sandbox, "id -u")[1].strip()
    assert _run(sandbox, "/usr/local/bin/sid -u; /usr/local/bin/sid -ru")[1] == f"{uid}\n" * 2
