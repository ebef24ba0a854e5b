"""Sandboxes end to end: inputs, env, files, results, failures, cancel, waves, isolation."""

from __future__ import annotations

import gc
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from inspect_swarm.server._serve import assemble
from inspect_swarm.server.domain._server import SwarmServer
from inspect_swarm.server.edge._schema import StartBody, run_request
from inspect_swarm.server.model._keys import Owner
from inspect_swarm.server.model._types import Settings
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._cgroups import Limits
from inspect_swarm.server.sandboxes._isolation import (
    IsolationConfig,
    NamespaceSandbox,
    Sandbox,
    SandboxHost,
)

from ...servers import Server, needs_namespaces, start_server, wait_for, wait_until

pytestmark = needs_namespaces

TINY = "1x1"


def test_count_runs_every_index_with_the_swarm_and_lease_variables(
    server: Server, engine: str
) -> None:
    with server.client() as client:
        run = client.swarms.start(
            'echo "$MARITIME_SWARM_INDEX/$MARITIME_SWARM_COUNT $MARITIME_SWARM_ID '
            '$MARITIME_SERVER_LEASE_ID $MARITIME_API_KEY $E2B_API_KEY $MARITIME_API_URL" '
            '"${INSPECT_SWARM_NODE-none}"',
            count=5,
            size=TINY,
            name="env",
        )
        assert run["size"] == {"name": "custom", "vcpus": 1, "memoryGb": 1}
        done = wait_for(client, run["id"])
        lease = client.servers.lease()
    assert done["status"] == "completed"
    assert done["counts"]["succeeded"] == 5 and done["done"] == 5
    keys = set()
    for i, sandbox in enumerate(done["sandboxes"]):
        index, run_id, lease_id, key, e2b_key, url, node = sandbox["stdoutTail"].split()
        assert (sandbox["index"], index) == (i, f"{i}/5")
        # the node it ran on: none on the local engine, Ray's node id on Ray
        assert node == (sandbox["node"] if engine == "ray" else "none")
        assert (sandbox["node"] is None) is (engine == "local")
        assert (run_id, lease_id, url) == (run["id"], lease["id"], server.url)
        # each sandbox has a key of its own (see tests/security/test_keys.py)
        assert key.startswith("mlk_") and e2b_key == key != lease["apiKey"]
        keys.add(key)
    assert len(keys) == 5
    for sandbox in done["sandboxes"]:
        assert sandbox["sandboxId"].startswith("sbx-") and sandbox["exitCode"] == 0
    for key in (
        "id",
        "name",
        "status",
        "count",
        "size",
        "concurrency",
        "counts",
        "done",
        "waitingReason",
        "error",
        "durationSeconds",
        "estimatedCostCents",
    ):
        assert key in done


def test_inputs_quote_args_and_set_env_files_and_results(server: Server) -> None:
    inputs = [
        {"args": ["two words", "$HOME", "it's"]},
        {"args": ["--seed", "2"], "env": {"TEMPERATURE": "0.7"}},
        {"files": {"/work/task.json": '{"id": 3}'}},
    ]
    command = (
        'for a in "$@"; do echo "[$a]"; done; echo "T=$TEMPERATURE G=$SHARED"; '
        "cat /work/task.json 2>/dev/null; mkdir -p /work; "
        'printf "%s" "r$MARITIME_SWARM_INDEX" > /work/result.json'
    )
    with server.client() as client:
        run = client.swarms.start(
            f"sh -c '{command}' sh",
            inputs=inputs,
            size=TINY,
            env={"SHARED": "all"},
            result_path="/work/result.json",
        )
        done = wait_for(client, run["id"])
        results = client.swarms.results(run["id"])
    assert run["count"] == 3
    assert [r["index"] for r in results] == [0, 1, 2]
    first, second, third = (r["stdoutTail"] for r in results)
    assert first.startswith("[two words]\n[$HOME]\n[it's]\n")
    assert "[--seed]\n[2]\nT=0.7 G=all" in second
    assert '{"id": 3}' in third and "T= G=all" in third
    assert [r["result"] for r in results] == ["r0", "r1", "r2"]
    assert all(r["status"] == "succeeded" for r in done["sandboxes"])


def test_argv_command_and_binary_result(server: Server) -> None:
    with server.client() as client:
        run = client.swarms.start(
            [
                "python3",
                "-c",
                "import sys; open('/tmp/r','wb').write(bytes([0,255,1]));print(sys.argv[1:])",
            ],
            inputs=[{"args": ["a b", "c"]}],
            size=TINY,
            result_path="/tmp/r",
        )
        (sandbox,) = wait_for(client, run["id"])["sandboxes"]
    assert sandbox["stdoutTail"] == "['a b', 'c']\n"
    assert (sandbox["result"], sandbox["resultEncoding"]) == ("AP8B", "base64")


def one_sandbox(server: Server, script: str) -> Any:
    """Run `script` in one small sandbox; the sandbox's record once it has ended."""
    with server.client() as client:
        run = client.swarms.start(script, count=1, size=TINY)
        (sandbox,) = wait_for(client, run["id"])["sandboxes"]
    return sandbox


def test_failures_carry_their_reason(server: Server) -> None:
    with server.client() as client:
        exit3 = client.swarms.start("echo out; echo err >&2; exit 3", count=1, size=TINY)
        slow = client.swarms.start("sleep 30", count=1, size=TINY, timeout_seconds=1)
        oom = client.swarms.start("python3 -c 'a = bytearray(3 * 1024**3)'", count=1, size=TINY)
        boot = client.swarms.start("true", count=1, size=TINY, files={"/proc/not-writable": "x"})
        big = client.swarms.start(
            "head -c 70000 /dev/zero > /tmp/big", count=1, size=TINY, result_path="/tmp/big"
        )
        outcomes = {
            name: wait_for(client, r["id"])["sandboxes"][0]
            for name, r in [
                ("exit3", exit3),
                ("slow", slow),
                ("oom", oom),
                ("boot", boot),
                ("big", big),
            ]
        }
    assert outcomes["exit3"]["status"] == "failed"
    assert outcomes["exit3"]["exitCode"] == 3 and outcomes["exit3"]["error"] == "exit code 3"
    assert (outcomes["exit3"]["stdoutTail"], outcomes["exit3"]["stderrTail"]) == ("out\n", "err\n")
    assert outcomes["slow"]["error"] == "timeout after 1s"
    assert outcomes["oom"]["error"] == "out of memory (1 GiB)"
    assert outcomes["boot"]["error"].startswith("boot failed: cannot write /proc/not-writable")
    assert "64 KB" in outcomes["big"]["error"] and outcomes["big"]["status"] == "failed"
    assert all(o["status"] == "failed" for o in outcomes.values())


def test_output_tails_keep_the_last_16_kb(server: Server) -> None:
    sandbox = one_sandbox(server, "seq 1 20000")
    tail = sandbox["stdoutTail"]
    assert len(tail.encode()) == 16 * 1024
    assert tail.endswith("19999\n20000\n")


def test_cancel_stops_running_and_queued_and_keeps_finished(server: Server) -> None:
    with server.client() as client:
        run = client.swarms.start(
            '[ "$MARITIME_SWARM_INDEX" = 0 ] && exit 0; sleep 60',
            count=5,
            size=TINY,
            concurrency=2,
        )

        def two_running() -> bool:
            counts = client.swarms.get(run["id"])["counts"]
            return counts["running"] == 2 and counts["succeeded"] == 1

        wait_until(two_running)
        started = time.monotonic()
        client.swarms.cancel(run["id"])
        done = wait_for(client, run["id"], timeout=20)
        elapsed = time.monotonic() - started
    statuses = [s["status"] for s in done["sandboxes"]]
    assert statuses == ["succeeded"] + ["cancelled"] * 4
    assert [s["startedAt"] is None for s in done["sandboxes"]] == [False, False, False, True, True]
    assert done["status"] == "completed" and elapsed < 20


def test_more_sandboxes_than_fit_run_in_waves(tmp_path: Path) -> None:
    small = start_server(tmp_path / "state", "--memory-gib", "2", "--stuck-timeout", "2")
    try:
        with small.client() as client:
            run = client.swarms.start("sleep 0.3", count=6, size=TINY)
            assert run["concurrency"] == 2
            done = wait_for(client, run["id"])
            assert done["counts"]["succeeded"] == 6
            assert small.health()["maxRunning"] == 2
            # one run fills the memory: the next waits with a reason, then fails when stuck
            hog = client.swarms.start("sleep 60", count=2, size=TINY)
            blocked = client.swarms.start("true", count=1, size=TINY)
            wait_until(lambda: client.swarms.get(blocked["id"])["waitingReason"] is not None)
            reason = client.swarms.get(blocked["id"])["waitingReason"]
            assert reason == "swarm server memory full: 2/2 GiB booked"
            stuck = wait_for(client, blocked["id"], timeout=20)["sandboxes"][0]
            assert stuck["status"] == "failed" and reason in stuck["error"]
            client.swarms.cancel(hog["id"])
            wait_for(client, hog["id"])
    finally:
        small.kill()


def test_isolation(server: Server, tmp_path: Path) -> None:
    marker = tmp_path / "host-secret.txt"
    marker.write_text("host")
    os.chmod(tmp_path, 0o755)
    script = (
        "hostname; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; "
        "echo sandbox > /usr/local/x-$MARITIME_SWARM_INDEX; ls /usr/local | grep x- ; "
        f"ls {server.state_dir} 2>&1 | head -1; ps -e --no-headers | wc -l; "
        "sleep 1"
    )
    with server.client() as client:
        run = client.swarms.start(script, count=3, size=TINY)
        done = wait_for(client, run["id"])
    for sandbox in done["sandboxes"]:
        lines = sandbox["stdoutTail"].split("\n")
        assert lines[0] == sandbox["sandboxId"]  # own hostname (UTS namespace)
        assert lines[1:2] == ["lo"] and lines[2].startswith("x-")  # only loopback
        assert lines[2] == f"x-{sandbox['index']}"  # sees its own write, not its siblings'
        assert "No such file" in lines[3] or lines[3] == ""  # the server's state is masked
        assert int(lines[4]) < 10  # own PID namespace
    assert not list(Path("/usr/local").glob("x-*"))  # the host's root is untouched
    assert json.dumps(done).count("host-secret") == 0


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[tuple[Store, SandboxHost, SwarmServer]]:
    """A store, sandbox host and the domain over them in this process (no HTTP), cleaned up
    after."""
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state"))
    try:
        yield store, host, assemble(store, host, Settings(2))
    finally:
        gc.unfreeze()
        await host.aclose()
        host.cgroups.remove_base()
        store.close()


async def run_to_completion(domain: SwarmServer, raw: dict[str, Any]) -> str:
    """Serve `domain` until the run `raw` starts has completed; the run's id (`raw` is only
    validated, not checked: a value the edge refuses reaches the domain)."""
    request = run_request(dict(StartBody.model_validate(raw)), raw, None)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            view, _ = domain.start(Owner("acct_test"), request)
            while view.run.status != "completed":  # noqa: ASYNC110 (no event to await)
                await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    return view.run.id


@pytest.mark.anyio
async def test_a_sandbox_that_ended_before_its_command_started_fails_with_why(
    local: tuple[Store, SandboxHost, SwarmServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, host, domain = local
    boot = host.create

    async def boot_then_end(sandbox_id: str, limits: Limits) -> Sandbox:
        # its PID 1 dies between the boot and the command (the kernel's OOM killer, say)
        sandbox = await boot(sandbox_id, limits)
        assert isinstance(sandbox, NamespaceSandbox)
        signal.pidfd_send_signal(sandbox.init_fd, signal.SIGKILL)
        await anyio.wait_readable(sandbox.init_fd)
        return sandbox

    monkeypatch.setattr(host, "create", boot_then_end)
    raw = {"command": "echo never", "count": 1, "size": {"vcpus": 1, "memoryGb": 1}}
    (sandbox,) = store.sandboxes(await run_to_completion(domain, raw))
    assert (sandbox.status, sandbox.error) == ("failed", f"sandbox {sandbox.sandbox_id} has ended")
    assert not (host.sandbox_dir / sandbox.sandbox_id).exists()


@pytest.mark.anyio
async def test_a_sandbox_that_cannot_be_made_anew_gives_way_to_a_new_one(
    local: tuple[Store, SandboxHost, SwarmServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, host, domain = local
    boot, booted = host.create, list[NamespaceSandbox]()

    async def boot_to_die_before_reset(sandbox_id: str, limits: Limits) -> Sandbox:
        sandbox = await boot(sandbox_id, limits)
        assert isinstance(sandbox, NamespaceSandbox)
        booted.append(sandbox)
        reset = sandbox.reset

        async def die_then_reset(new_id: str) -> None:
            # its PID 1 dies once its command has ended (the kernel's OOM killer, say)
            signal.pidfd_send_signal(sandbox.init_fd, signal.SIGKILL)
            await anyio.wait_readable(sandbox.init_fd)
            await reset(new_id)

        monkeypatch.setattr(sandbox, "reset", die_then_reset)
        return sandbox

    monkeypatch.setattr(host, "create", boot_to_die_before_reset)
    raw = {"command": "hostname", "count": 2, "concurrency": 1, "size": {"vcpus": 1, "memoryGb": 1}}
    sandboxes = store.sandboxes(await run_to_completion(domain, raw))
    assert [(s.status, s.stdout_tail) for s in sandboxes] == [
        ("succeeded", f"{s.sandbox_id}\n") for s in sandboxes
    ]
    assert len(booted) == 2 and not booted[0].dir.exists()


@pytest.mark.anyio
async def test_collections_skip_what_the_server_made_at_startup(tmp_path: Path) -> None:
    # a full collection of the ~200k objects of a started server would stall every request
    store = Store(tmp_path / "swarm.db")
    domain = assemble(store, SandboxHost(IsolationConfig(tmp_path, "process")), Settings(2))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(domain.serve)
            assert gc.get_freeze_count() > 0
            tg.cancel_scope.cancel()
    finally:
        gc.unfreeze()
        store.close()


def test_a_fifo_as_the_result_file_does_not_stall_the_server(server: Server) -> None:
    with server.client() as client:
        run = client.swarms.start("mkfifo /tmp/r", count=1, size=TINY, result_path="/tmp/r")
        (sandbox,) = wait_for(client, run["id"])["sandboxes"]
        assert client.swarms.get(run["id"])["status"] == "completed"  # the server answers
    assert "resultPath /tmp/r" in sandbox["error"] and "not a regular file" in sandbox["error"]


def test_root_in_a_sandbox_has_no_capability_that_reaches_past_it(server: Server) -> None:
    script = (
        "grep CapEff /proc/self/status; "
        "mknod /tmp/disk b 8 0 2>/dev/null && echo made a device; "
        "mount -t tmpfs none /mnt 2>/dev/null && echo mounted; "
        "chown 1000 /tmp && echo chowned"
    )
    sandbox = one_sandbox(server, script)
    lines = sandbox["stdoutTail"].splitlines()
    effective = int(lines[0].split()[1], 16)
    # CAP_DAC_READ_SEARCH, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_MKNOD
    assert all(not effective & (1 << cap) for cap in (2, 16, 17, 19, 21, 27))
    # CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_KILL, CAP_SETGID, CAP_SETUID
    assert all(effective & (1 << cap) for cap in (0, 1, 5, 6, 7))
    assert lines[1:] == ["chowned"]


def test_root_in_a_sandbox_cannot_tune_or_read_the_hosts_kernel(server: Server) -> None:
    # each write puts back the value it read: harmless even where it would succeed
    script = (
        "for t in kernel/core_pattern vm/swappiness; do "
        'v=$(cat /proc/sys/$t); echo "$v" > /proc/sys/$t 2>/dev/null && echo tuned $t; done; '
        "cat /proc/irq/default_smp_affinity > /proc/irq/default_smp_affinity 2>/dev/null "
        "&& echo tuned irq; "
        "for f in /proc/timer_list /proc/keys; do [ -s $f ] && echo read $f; done; "
        "ls /sys/firmware | head -1; cat /proc/sys/kernel/ostype"
    )
    sandbox = one_sandbox(server, script)
    # tunables stay readable
    assert sandbox["stdoutTail"].splitlines() == ["Linux"]


FRESH_CHECKS = (
    # what an earlier sandbox of the run left must not be here
    "ls -d /marker /root/marker /tmp/marker /dev/shm/marker /dev/marker 2>/dev/null; "
    "ipcs -m | grep -c '^0x'; ps -eo args | grep -c '^sleep 1000'; stat -c %a / /dev/null; "
    "hostname; readlink /proc/self/ns/pid /proc/self/ns/mnt; "
    'echo "$(ulimit -n) $(cat /proc/self/oom_score_adj)"; '
    # a port left in TIME-WAIT by a network that was used would not bind
    'python3 -c \'import socket; s = socket.socket(); s.bind(("127.0.0.1", 5000)); s.listen(); '
    'c = socket.create_connection(("127.0.0.1", 5000)); a, _ = s.accept(); a.close(); '
    'print("bound")\'; '
    # and leave things behind, in /tmp and /dev only or in the root too
    "touch /tmp/marker /dev/shm/marker /dev/marker; chmod 600 /dev/null; "
    "ipcmk -M 4096 >/dev/null; sleep 1000 >/dev/null 2>&1 & "
    # commands inherit this from PID 1, and root can change it in PID 1
    "echo 500 > /proc/1/oom_score_adj; "
)


@pytest.mark.parametrize("in_root", [False, True])
def test_each_sandbox_of_a_run_is_fresh_though_it_reuses_the_last_ones_pid_1(
    server: Server, engine: str, in_root: bool
) -> None:
    script = FRESH_CHECKS + ("touch /marker /root/marker; chmod 700 /" if in_root else "true")
    with server.client() as client:
        run = client.swarms.start(script, count=3, concurrency=1, size=TINY)
        sandboxes = wait_for(client, run["id"])["sandboxes"]
    outputs = [s["stdoutTail"].splitlines() for s in sandboxes]  # type: ignore[index]
    assert [out[:4] for out in outputs] == [["0", "0", outputs[0][2], "666"]] * 3
    assert [out[4] for out in outputs] == [s["sandboxId"] for s in sandboxes]  # type: ignore[index]
    assert [out[7] for out in outputs] == [outputs[0][7]] * 3
    # on Ray, commands start as Ray's workers do: first for the kernel to kill when the node
    # runs out of memory, before Ray's own processes
    assert outputs[0][7].split()[1] == ("1000" if engine == "ray" else "0")
    assert [out[8] for out in outputs] == ["bound"] * 3
    # one PID namespace: made anew, not again (on Ray, by the slot that holds it on its node)
    assert len({out[5] for out in outputs}) == 1
    if not in_root:  # a root no command changed is kept, with /tmp and /dev made anew
        assert len({out[6] for out in outputs}) == 1


def test_a_limit_lowered_in_pid_1_does_not_reach_the_next_sandbox(server: Server) -> None:
    # raising it back takes CAP_SYS_RESOURCE: without it, the next sandbox is a new one
    script = "ulimit -n; prlimit --pid 1 --nofile=200:200"
    with server.client() as client:
        run = client.swarms.start(script, count=2, concurrency=1, size=TINY)
        first, second = wait_for(client, run["id"])["sandboxes"]  # type: ignore[misc]
    assert second["stdoutTail"] == first["stdoutTail"] != "200\n"


def test_out_of_memory_is_counted_from_each_sandboxs_start(server: Server) -> None:
    script = (
        '[ "$MARITIME_SWARM_INDEX" = 0 ] && python3 -c "a = bytearray(3 * 1024**3)"; '
        "readlink /proc/self/ns/pid"
    )
    with server.client() as client:
        run = client.swarms.start(script, count=2, concurrency=1, size=TINY)
        first, second = wait_for(client, run["id"])["sandboxes"]  # type: ignore[misc]
    assert (first["status"], first["error"]) == ("failed", "out of memory (1 GiB)")
    assert (second["status"], second["error"]) == ("succeeded", None)
    # in the sandbox made anew (on either engine, a slot keeps it for the run's next): the
    # kernel killed the command, not the far smaller PID 1
    assert first["stdoutTail"] == second["stdoutTail"]


def test_a_hidden_file_cannot_be_changed_nor_is_it_the_hosts_dev_null(server: Server) -> None:
    # on the host's /dev/null, chmod to its own mode would change nothing: harmless either way
    sandbox = one_sandbox(server, "stat -c %d:%i /proc/keys; chmod 666 /proc/keys && echo chmod")
    host = os.stat("/dev/null")
    assert sandbox["stdoutTail"].splitlines()[0] != f"{host.st_dev}:{host.st_ino}"
    assert "chmod" not in sandbox["stdoutTail"]
    assert "Read-only file system" in sandbox["stderrTail"]
