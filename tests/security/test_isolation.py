"""Attacks on the sandbox itself, from inside it: the host's files, the kernel's interfaces
Docker refuses, the host's cgroups, its disk and pids, and the server's reads for a sandbox.

A canary (a random token in files outside every path sandboxes are given: the test's
temporary directory, the home of the user running the tests, the checkout) must never come
back, whatever the sandbox tries.
"""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..server.engines.test_sandboxes import TINY
from ..servers import KEY, Server, point_e2b_at, start_server, wait_for
from .conftest import in_sandbox

MAX_PIDS = 256
"""The server's cap on all its sandboxes' processes: small, so that a fork bomb is safe."""
DISK_GIB = 0.25


@pytest.fixture(scope="module")
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Path]]]:
    """A token, and the files outside every exposed path that hold it."""
    token = secrets.token_hex(16)
    name = f".inspect-swarm-canary-{token[:8]}"
    places = [tmp_path_factory.mktemp("canary"), Path.home(), Path(__file__).parents[2]]
    paths = [place / name for place in places]
    for path in paths:
        path.write_text(token)
        path.chmod(0o644)
    yield token, paths
    for path in paths:
        path.unlink()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's server: a small disk per sandbox and a small cap on all their pids."""
    handle = start_server(
        tmp_path_factory.mktemp("isolation") / "state",
        *("--memory-gib", "8", "--disk-gib", str(DISK_GIB), "--max-pids", str(MAX_PIDS)),
    )
    yield handle
    handle.kill(signal.SIGTERM)


def run_one(server: Server, script: str, **start: object) -> dict[str, object]:
    """`script` in one small sandbox, with more of the start call's arguments; its record."""
    with server.client() as client:
        run = client.swarms.start(script, count=1, size=TINY, **start)  # type: ignore[arg-type]
        (sandbox,) = wait_for(client, run["id"])["sandboxes"]  # type: ignore[misc]
    return dict(sandbox)


def test_the_hosts_secrets_and_files_are_not_in_the_sandbox(
    server: Server, canary: tuple[str, list[Path]]
) -> None:
    token, paths = canary
    ready = server.state_dir.parent / f"{server.state_dir.name}.ready"  # the server's key
    script = (
        f"cat {' '.join(map(str, paths))} {ready} {server.state_dir}/swarm.db; "
        "for p in /proc/[0-9]*; do "
        f"for c in {' '.join(map(str, paths))}; do cat $p/root$c; done; done; "
        "ls -A /root; cat /etc/shadow /etc/gshadow"
    )
    record = in_sandbox(server, script)
    out = str(record["stdoutTail"])
    assert token not in out + str(record["stderrTail"])
    assert KEY not in out
    # /root is the sandbox's own, empty; its shadow files are its own, every password locked
    shadow = [line.split(":") for line in out.splitlines() if line.count(":") >= 3]
    assert shadow and {entry[1] for entry in shadow} == {"*"}
    assert out.splitlines()[0].startswith("root:")  # nothing listed in /root before it
    assert "root:" in Path("/etc/shadow").read_text()  # the host's, for comparison
    assert out != Path("/etc/shadow").read_text() + Path("/etc/gshadow").read_text()


def test_user_namespaces_are_refused(server: Server) -> None:
    script = (
        "unshare -Ur sh -c 'mount -t tmpfs none /mnt && echo mounted'; "
        "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "print(libc.unshare(0x10000000), ctypes.get_errno())'"  # CLONE_NEWUSER
    )
    record = in_sandbox(server, script)
    assert "mounted" not in str(record["stdoutTail"])
    assert str(record["stdoutTail"]).splitlines()[-1] == "-1 1"  # EPERM


KERNEL_INTERFACES = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
generic = os.uname().machine != "x86_64"
calls = {
    "io_uring_setup": (425, 1, ctypes.create_string_buffer(120)),
    # a user-space-only software event of this process, which perf_event_paranoid 2 allows
    "perf_event_open": (
        241 if generic else 298,
        ctypes.create_string_buffer((1).to_bytes(4, "little") + (128).to_bytes(4, "little")
            + bytes(32) + (0x60).to_bytes(8, "little") + bytes(80)),
        0, -1, -1, 0,
    ),
    "bpf": (280 if generic else 321, 0, ctypes.create_string_buffer(128), 128),
}
for name, (number, *args) in calls.items():
    print(name, libc.syscall(number, *args), ctypes.get_errno())
"""


def test_io_uring_perf_events_and_bpf_are_refused(server: Server) -> None:
    record = in_sandbox(server, f"python3 -c '{KERNEL_INTERFACES}'")
    lines = str(record["stdoutTail"]).splitlines()
    assert lines == [f"{name} -1 1" for name in ("io_uring_setup", "perf_event_open", "bpf")]


def test_the_hosts_cgroups_are_not_seen(server: Server) -> None:
    record = in_sandbox(server, "cat /proc/self/cgroup /proc/1/cgroup; ls /sys/fs/cgroup")
    out = str(record["stdoutTail"])
    assert out and "inspect-swarm" not in out
    assert all(line.endswith(":/") for line in out.splitlines())


def test_a_sandbox_writes_no_more_than_its_disk(server: Server) -> None:
    # more than its disk holds, on its root and in a system directory's layer
    script = "dd if=/dev/zero of=/root/big bs=1M count=300; fallocate -l 1G /usr/big"
    record = in_sandbox(server, script)
    assert str(record["stderrTail"]).count("No space left on device") == 2
    # nothing else happened: the next sandbox has all of its own disk
    after = in_sandbox(server, "dd if=/dev/zero of=/root/big bs=1M count=200 && echo written")
    assert after["status"] == "succeeded" and "written" in str(after["stdoutTail"])


def test_a_fork_bomb_stops_at_the_cap_on_all_sandboxes_pids(server: Server) -> None:
    # each sandbox may have 4096 processes; all of them together no more than MAX_PIDS
    bomb = (
        "import os\n"
        "started = 0\n"
        "try:\n"
        "    while started < 600:\n"
        "        os.posix_spawn('/bin/sleep', ['sleep', '30'], {})\n"
        "        started += 1\n"
        "except OSError as ex:\n"
        "    print(ex.strerror)\n"
        "print(started)\n"
    )
    record = in_sandbox(server, f'python3 -c "{bomb}"; kill -9 -1')
    started = int(str(record["stdoutTail"]).split()[-1])
    assert started <= MAX_PIDS
    # the host and the server are fine, and so is the next sandbox
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    assert in_sandbox(server, "echo fine")["stdoutTail"] == "fine\n"


@pytest.mark.parametrize(
    ("setup", "result_path"),
    [
        ("true", "/proc/1/environ"),
        ("ln -s /proc/1/environ /tmp/result", "/tmp/result"),
        ("true", "/proc/1/root/proc/1/environ"),
    ],
)
def test_the_result_is_read_as_the_sandbox_would_read_it(
    server: Server, setup: str, result_path: str
) -> None:
    # PID 1's environment is not the command's to read (it takes CAP_SYS_PTRACE)
    assert "Permission denied" in str(in_sandbox(server, "cat /proc/1/environ")["stderrTail"])
    record = run_one(server, setup, result_path=result_path)
    assert record.get("result") is None
    assert "Permission denied" in str(record["error"])


def test_no_read_for_a_sandbox_returns_the_canary_or_pid_1s_environment(
    server: Server, canary: tuple[str, list[Path]]
) -> None:
    token, paths = canary
    for path in paths:
        for result_path in (str(path), f"/proc/1/root{path}", f"/proc/self/root{path}"):
            record = run_one(server, "true", result_path=result_path)
            assert token not in str(record.get("result"))
    with server.client() as client:
        sandbox = client.sandboxes.create(size=TINY, timeout_seconds=60)
    try:
        headers = {
            "E2b-Sandbox-Id": sandbox["sandboxId"],
            "X-Access-Token": sandbox["envdAccessToken"],
        }
        with httpx.Client(base_url=sandbox["envdUrl"], headers=headers, timeout=30) as envd:
            for path in [*map(str, paths), "/proc/1/environ"]:
                for user in ("root", "user"):
                    read = envd.get("/files", params={"path": path, "username": user})
                    assert read.status_code in (403, 404) and token not in read.text
                    assert "PATH=" not in read.text
    finally:
        with server.client() as client:
            client.sandboxes.kill(sandbox["sandboxId"])


def test_pid_1_loads_no_code_the_sandbox_planted(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sandbox's root names a module of its own for group lookups, and puts a FIFO in its
    # place: a PID 1 that looked groups up through the C library would open it, and wait
    e2b = pytest.importorskip("e2b")
    point_e2b_at(server, monkeypatch)
    sbx = e2b.Sandbox.create(timeout=60)
    try:
        plant = (
            "printf 'passwd: files\\ngroup: pwn\\ninitgroups: pwn\\n' > /etc/nsswitch.conf; "
            "for d in /lib /lib64 /usr/lib /usr/lib64 /usr/lib/*-linux-gnu; do "
            "mkfifo $d/libnss_pwn.so.2; done 2>/dev/null; ls /usr/lib/*/libnss_pwn.so.2"
        )
        assert sbx.commands.run(plant, user="root").exit_code == 0
        assert sbx.commands.run("id -un", user="user", timeout=15).stdout == "user\n"
    finally:
        sbx.kill()
