"""A killed server leaves no sandbox behind, and a restarted one loses nothing finished."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from .conftest import Server, needs_namespaces, start_server, wait_for, wait_until

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
    finally:
        second.kill()
    assert not _sandbox_processes(state)
