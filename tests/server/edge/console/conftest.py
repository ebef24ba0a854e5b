"""A real server with its console, for the module's tests (the local engine)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import pytest

from ....servers import Server, start_server


def console_url(server: Server) -> str:
    """Where `server`'s console listens (its ready file says)."""
    ready = server.state_dir.parent / f"{server.state_dir.name}.ready"
    return str(json.loads(ready.read_text())["consoleUrl"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with 8 GiB to book and the test keys, with its console."""
    handle = start_server(tmp_path_factory.mktemp("console") / "state", "--memory-gib", "8")
    yield handle
    handle.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def console(server: Server) -> str:
    """The console's address."""
    return console_url(server)
