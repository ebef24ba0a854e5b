"""No sandbox is left behind: after a crash (by run metadata), and after the server dies."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from e2b import Sandbox

from inspect_swarm.sandbox import SwarmServerConfig, SwarmServerSandboxEnvironment
from inspect_swarm.sandbox._local_server import LocalServer

from ...e2b_servers import live_sandboxes
from ...servers import KEY, Server, start_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_cleanup_finds_what_a_crashed_eval_left(
    e2b_env: Server, provider_config: SwarmServerConfig
) -> None:
    # sample_init without sample_cleanup: the eval process died in between
    await SwarmServerSandboxEnvironment.sample_init("crashed", provider_config, {})
    await SwarmServerSandboxEnvironment.sample_init("other", provider_config, {})
    assert len(live_sandboxes(e2b_env)) == 2
    await SwarmServerSandboxEnvironment.task_cleanup("crashed", provider_config, True)
    [left] = live_sandboxes(e2b_env)
    assert left["metadata"]["inspect_task"] == "other"  # type: ignore[index]
    # `inspect sandbox cleanup swarm_server` finds the rest by their metadata
    await SwarmServerSandboxEnvironment.cli_cleanup(None)
    assert live_sandboxes(e2b_env) == []


async def test_without_a_configured_server_one_is_started_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("E2B_API_URL", "E2B_DOMAIN", "E2B_API_KEY", "E2B_SANDBOX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("MARITIME_API_KEY", raising=False)
    envs = await SwarmServerSandboxEnvironment.sample_init("local", None, {})
    try:
        result = await envs["default"].exec(["hostname"])
        assert (
            result.stdout.strip()
            == envs["default"].as_type(SwarmServerSandboxEnvironment).sandbox_id
        )
    finally:
        await SwarmServerSandboxEnvironment.sample_cleanup("local", None, envs, False)
    process, key = LocalServer.process, LocalServer.api_key
    assert process is not None and process.poll() is None and key is not None
    # its key came in its ready file (0600), not on its command line (any user reads that)
    cmdline = await anyio.Path(f"/proc/{process.pid}/cmdline").read_bytes()
    assert key.encode() not in cmdline


def _marked(marker: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return found.stdout.split()


def test_sandboxes_end_when_the_server_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed = start_server(tmp_path / "state", "--memory-gib", "4")
    try:
        monkeypatch.setenv("E2B_API_URL", doomed.url)
        monkeypatch.setenv("E2B_SANDBOX_URL", doomed.url)
        monkeypatch.setenv("E2B_API_KEY", KEY)
        marker = "sleep 98765"
        # the handles keep the commands' streams open (a closed stream ends its command)
        handles = [Sandbox.create().commands.run(marker, background=True) for _ in range(2)]
        assert len(handles) == 2 and _marked(marker)
    finally:
        doomed.kill(signal.SIGKILL)
    deadline = time.monotonic() + 20
    while _marked(marker):
        assert time.monotonic() < deadline, "sandbox processes outlived their server"
        time.sleep(0.1)
