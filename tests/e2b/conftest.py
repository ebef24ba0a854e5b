"""A real swarm server for the E2B tests, and the variables that point the e2b SDK at it."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inspect_swarm.sandbox import SwarmServerConfig

from ..server.conftest import KEY, Server, needs_namespaces, start_server

pytest.importorskip("e2b")

pytestmark = needs_namespaces


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the folder, with 8 GiB to book (E2B sandboxes book 1 GiB each)."""
    # each sandbox has a private /tmp: share the environment whose python the agents run,
    # wherever the checkout lives (CI's may be under /tmp)
    environment = str(Path(sys.prefix).parent)
    handle = start_server(
        tmp_path_factory.mktemp("e2b") / "state", "--memory-gib", "8", "--share", environment
    )
    yield handle
    handle.kill(signal.SIGTERM)


@pytest.fixture
def e2b_env(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """Point the unmodified e2b SDK at the test server."""
    monkeypatch.setenv("E2B_API_URL", server.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", server.url)
    monkeypatch.setenv("E2B_API_KEY", KEY)
    monkeypatch.delenv("E2B_DOMAIN", raising=False)
    return server


@pytest.fixture
def provider_config(server: Server) -> SwarmServerConfig:
    return SwarmServerConfig(api_url=server.url, api_key=KEY)


def live_sandboxes(server: Server) -> list[dict[str, object]]:
    """The E2B sandboxes alive on the server."""
    response = httpx.get(f"{server.url}/v2/sandboxes", headers={"X-API-KEY": KEY}, timeout=30)
    response.raise_for_status()
    return list(response.json())


__all__ = ["KEY", "Server", "live_sandboxes"]
