"""A real swarm server per test module, started as a subprocess on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from inspect_swarm.client import SwarmsClient
from inspect_swarm.server.sandboxes._isolation import SYSTEM_DIRS, namespaces_supported

from .conformance import ConformingTransport
from .ray_cluster import RayCluster

KEY = "test-key"
OTHER_KEY = "other-key"
READ_ONLY_KEY = "read-key"

needs_namespaces = pytest.mark.skipif(
    not namespaces_supported(), reason="namespace sandboxes need Linux, root and util-linux"
)


@dataclass
class Server:
    url: str
    state_dir: Path
    process: subprocess.Popen[bytes]
    args: tuple[str, ...]
    conform: bool = False
    """Check every answer to `client()` and `http()` against the server's OpenAPI document."""

    def client(self, key: str = KEY, **kwargs: object) -> SwarmsClient:
        if self.conform:
            kwargs.setdefault("transport", ConformingTransport(self.url))
        return SwarmsClient(api_key=key, base_url=self.url, poll_interval=0.1, **kwargs)  # type: ignore[arg-type]

    def http(self, key: str | None = KEY) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        transport = ConformingTransport(self.url) if self.conform else None
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, transport=transport)

    def kill(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=90)

    def health(self) -> dict[str, object]:
        return dict(httpx.get(f"{self.url}/healthz", timeout=10).json())


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "inspect_swarm.cli", *args]


SCRIPT = str(Path(sys.executable).parent / "inspect-swarm")
"""The console script, as a user runs it."""


def run_script(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`inspect-swarm ARGS` run to its end, its output in pipes (and `stdin` its input)."""
    return subprocess.run(
        [SCRIPT, *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


ACCOUNTS = (KEY, OTHER_KEY, f"{READ_ONLY_KEY}:read")


def point_e2b_at(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the unmodified e2b SDK at `server`, with the test key."""
    monkeypatch.setenv("E2B_API_URL", server.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", server.url)
    monkeypatch.setenv("E2B_API_KEY", KEY)
    monkeypatch.delenv("E2B_DOMAIN", raising=False)


def environment_args() -> list[str]:
    """The options that give sandboxes this test run's python environment: its directory
    shared (it may be under /tmp, which each sandbox has its own of), and the interpreter it
    is made from exposed if the system's directories do not hold it (pyenv's, in /root)."""
    base = Path(sys.base_prefix).resolve()
    exposed = any(base.is_relative_to(path) for path in SYSTEM_DIRS)
    return ["--share", str(Path(sys.prefix).parent), *([] if exposed else ["--expose", str(base)])]


def start_server(
    state_dir: Path,
    *extra: str,
    keys: tuple[str, ...] = ACCOUNTS,
    env: dict[str, str] | None = None,
) -> Server:
    """Start `inspect-swarm server` (with `keys`, one account each, and `env` added to the
    environment) on a free loopback port and wait until it answers."""
    state_dir.mkdir(parents=True, exist_ok=True)
    ready = state_dir.parent / f"{state_dir.name}.ready"
    ready.unlink(missing_ok=True)
    args = (
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--ready-file",
        str(ready),
        "--state-dir",
        str(state_dir),
        "--min-timeout",
        "1",
        "--no-context",  # leave the config of the tests (and benchmarks) alone
        *(arg for key in keys for arg in ("--api-key", key)),
        *extra,
    )
    log = (state_dir.parent / f"{state_dir.name}.log").open("ab")
    process = subprocess.Popen(
        cli("server", *args),
        stdout=log,
        stderr=log,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    # a safety net: a server starts in about a second, but a loaded machine compiling the
    # project's modules for the first time has taken over 15 s
    for _ in range(1200):
        if ready.exists() and ready.read_text():
            url = json.loads(ready.read_text())["url"]
            return Server(url, state_dir, process, args)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the server did not start: {log.name}")


def start_ray_server(state_dir: Path, cluster: RayCluster, *extra: str) -> Server:
    """Start a server on the Ray engine, on `cluster`."""
    return start_server(state_dir, "--engine", "ray", "--ray-address", cluster.address, *extra)


ENGINES = ["local", "ray"]
"""The engines the server tests run on (`--engines` picks; local alone by default)."""


def engine_args(request: pytest.FixtureRequest, engine: str) -> list[str]:
    """The server options of `engine` (the Ray cluster's address for ray, starting it)."""
    if engine == "local":
        return []
    cluster = request.getfixturevalue("ray_cluster")
    return ["--engine", "ray", "--ray-address", cluster.address]


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The engine of the module's server."""
    return str(request.param)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, engine: str
) -> Iterator[Server]:
    """A server with 8 GiB to book and test keys (one account each, and a read-only key),
    on each engine."""
    state = tmp_path_factory.mktemp("swarm") / "state"
    handle = start_server(state, "--memory-gib", "8", *engine_args(request, engine))
    handle.conform = True  # the API tests' answers are as the OpenAPI document says
    yield handle
    handle.kill(signal.SIGTERM)


def wait_for(client: SwarmsClient, run_id: str, timeout: float = 60) -> dict[str, object]:
    return client.swarms.wait(run_id, poll_interval=0.1, timeout=timeout)


def wait_until(predicate: object, timeout: float = 30) -> None:
    """Poll `predicate` (a callable) until it is true, failing after `timeout` seconds."""
    assert callable(predicate)
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
