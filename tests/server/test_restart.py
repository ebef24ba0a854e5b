"""A killed server leaves no sandbox behind, and a restarted one loses nothing finished."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from inspect_swarm.server.sandboxes._cgroups import _ROOT, _V1_CONTROLLERS, _own_cgroups
from inspect_swarm.server.sandboxes._isolation import base_cgroup_name

from ..servers import Server, needs_namespaces, point_e2b_at, start_server, wait_for, wait_until

pytestmark = needs_namespaces


def _sandbox_processes(state_dir: Path) -> list[str]:
    ps = subprocess.run(["ps", "-ww", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    return [
        line
        for line in ps.splitlines()
        if str(state_dir / "sbx") in line and not line.lstrip().startswith("Z")
    ]


def _runs_in_flight(server: Server) -> tuple[dict[str, object], dict[str, object]]:
    """A finished run, and one with two sandboxes running and two queued."""
    with server.client() as client:
        finished = client.swarms.start("echo kept", count=1, size="1x1")
        wait_for(client, finished["id"])
        flying = client.swarms.start(
            '[ "$MARITIME_SWARM_INDEX" -lt 2 ] && sleep 60; echo resumed', count=4, size="1x1"
        )
        wait_until(lambda: client.swarms.get(flying["id"])["counts"]["running"] == 2)
    return finished, flying


def test_killed_server_restarts_with_runs_in_flight(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = start_server(state, "--memory-gib", "2")
    try:
        finished, flying = _runs_in_flight(first)
        assert _sandbox_processes(state)
        with first.client() as client:
            lease_key = client.servers.lease()["apiKey"]
    finally:
        first.kill(signal.SIGKILL)
    wait_until(lambda: not _sandbox_processes(state), timeout=10)  # no orphans

    second = start_server(state, "--memory-gib", "2")
    try:
        with second.client() as client:
            kept = client.swarms.get(str(finished["id"]))["sandboxes"][0]
            assert (kept["status"], kept["stdoutTail"]) == ("succeeded", "kept\n")
            done = wait_for(client, str(flying["id"]))
            statuses = [(s["status"], s["error"]) for s in done["sandboxes"]]  # type: ignore[attr-defined]
            reason = "server restarted while the sandbox was running"
            assert statuses == [("failed", reason)] * 2 + [("succeeded", None)] * 2
            assert done["sandboxes"][3]["stdoutTail"] == "resumed\n"  # type: ignore[index]
            sandbox_id = done["sandboxes"][0]["sandboxId"]  # type: ignore[index]
            assert client.sandboxes.get(sandbox_id)["swarmId"] == flying["id"]
            # only its hash was kept: the lease's key still works, and a new one is shown
            shown = client.servers.lease()["apiKey"]
            assert shown != lease_key and client.servers.lease()["apiKey"] == shown
        for key in (lease_key, shown):
            with second.client(key) as holder:
                assert holder.swarms.get(str(finished["id"]))["id"] == finished["id"]
    finally:
        second.kill()
    assert not _sandbox_processes(state)


def _bases(state_dir: Path) -> list[Path]:
    """The base cgroups of a server on `state_dir` that exist (one per controller on v1)."""
    own, name = _own_cgroups(), base_cgroup_name(state_dir)
    places = [own.get(""), *(f"{c}/{own.get(c, '/')}" for c in _V1_CONTROLLERS)]
    return [path for path in (_ROOT / str(p).strip("/") / name for p in places) if path.is_dir()]


def test_a_killed_servers_cgroups_go_when_the_next_starts_and_live_ones_stay(
    tmp_path: Path,
) -> None:
    idle = start_server(tmp_path / "idle", "--memory-gib", "2")
    try:
        if idle.health()["isolation"]["cgroups"] == "none":  # type: ignore[index]
            pytest.skip("no writable cgroups here")
        with idle.client() as client:  # an idle server keeps an ended sandbox's cgroups
            wait_for(client, client.swarms.start("true", count=1, size="1x1")["id"])
        idle_bases = _bases(idle.state_dir)
        killed = start_server(tmp_path / "killed", "--memory-gib", "2")
        try:
            _runs_in_flight(killed)
        finally:
            killed.kill(signal.SIGKILL)
        killed_bases = _bases(killed.state_dir)
        assert killed_bases and idle_bases

        start_server(tmp_path / "next", "--memory-gib", "2").kill()
        assert _bases(tmp_path / "killed") == []
        assert _bases(tmp_path / "idle") == idle_bases
        assert all(any(p.is_dir() for p in base.iterdir()) for base in idle_bases)
        with idle.client() as client:
            run = wait_for(client, client.swarms.start("true", count=1, size="1x1")["id"])
            assert run["counts"]["succeeded"] == 1  # type: ignore[index]
    finally:
        idle.kill()
    # stopped, not killed: a server removes its own
    assert _bases(tmp_path / "idle") == [] and _bases(tmp_path / "next") == []


def test_snapshots_outlive_a_killed_server_and_copies_cut_short_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    e2b = pytest.importorskip("e2b")
    state = tmp_path / "state"
    first = start_server(state, "--memory-gib", "2")
    try:
        point_e2b_at(first, monkeypatch)
        sbx = e2b.Sandbox.create()
        sbx.files.write("kept.txt", "kept")
        snapshot = sbx.create_snapshot(name="across")
    finally:
        first.kill(signal.SIGKILL)
    # a copy the killed server was making when it died (none of its snapshots)
    cut_short = state / "snapshots" / "snap-cutshort"
    cut_short.mkdir()
    (cut_short / "part").write_text("half")

    second = start_server(state, "--memory-gib", "2")
    try:
        point_e2b_at(second, monkeypatch)
        listed = e2b.Sandbox.list_snapshots().next_items()
        assert [s.snapshot_id for s in listed] == [snapshot.snapshot_id]
        assert not cut_short.exists()
        with e2b.Sandbox.create("across") as again:
            assert again.files.read("kept.txt") == "kept"
        assert e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)
        assert list((state / "snapshots").iterdir()) == []
        assert (state / "snapshots").stat().st_mode & 0o777 == 0o700
    finally:
        second.kill()
