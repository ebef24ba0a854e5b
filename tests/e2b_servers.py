"""A real swarm server for the E2B tests and the `swarm_server` provider's, and the variables
that point the e2b SDK at it: fixtures the conftests of those folders bring in."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inspect_swarm.sandbox import SwarmServerConfig

from .servers import (
    ENGINES,
    KEY,
    Server,
    engine_args,
    environment_args,
    point_e2b_at,
    start_server,
)


@pytest.fixture(scope="package")
def tests_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every sandbox of `server` has at /tests (read-only), where the spec's
    tests scorer finds its script."""
    directory = tmp_path_factory.mktemp("tests")
    directory.chmod(0o755)  # the sandboxes' `user` runs it
    return directory


@pytest.fixture(name="engine", scope="package", params=ENGINES)
def e2b_engine(request: pytest.FixtureRequest) -> str:
    """The engine of the folder's server (`--engines` picks)."""
    return str(request.param)


@pytest.fixture(name="server", scope="package")
def e2b_server(
    tmp_path_factory: pytest.TempPathFactory,
    tests_dir: Path,
    request: pytest.FixtureRequest,
    engine: str,
) -> Iterator[Server]:
    """One server for the folder, with 8 GiB to book (E2B sandboxes book 1 GiB each), on
    each engine."""
    # the environment whose python the agents run
    handle = start_server(
        tmp_path_factory.mktemp("e2b") / "state",
        *("--memory-gib", "8", "--expose", f"{tests_dir}:/tests", *environment_args()),
        *engine_args(request, engine),
    )
    yield handle
    handle.kill(signal.SIGTERM)


@pytest.fixture
def e2b_env(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """Point the unmodified e2b SDK at the test server."""
    point_e2b_at(server, monkeypatch)
    return server


@pytest.fixture
def provider_config(server: Server) -> SwarmServerConfig:
    return SwarmServerConfig(api_url=server.url, api_key=KEY)


def live_sandboxes(server: Server) -> list[dict[str, object]]:
    """The E2B sandboxes alive on the server."""
    response = httpx.get(f"{server.url}/v2/sandboxes", headers={"X-API-KEY": KEY}, timeout=30)
    response.raise_for_status()
    return list(response.json())
