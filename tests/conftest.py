import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inspect_swarm._context import _swarm

from .ray_cluster import RayCluster, enter_own_network_namespace, start_cluster
from .servers import engine, server

__all__ = ["engine", "server"]  # the swarm server fixtures of tests/client, cli and server

os.environ.setdefault("INSPECT_DISPLAY", "none")
# the examples are importable, so tests run them as written
sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))


@pytest.fixture(scope="session", autouse=True)
def user_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A config directory of the test run's own: the contexts `inspect-swarm server` records,
    and the CLI and clients read, never touch the user's (servers the tests start inherit it)."""
    folder = tmp_path_factory.mktemp("config")
    old = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(folder)
    yield folder
    if old is None:
        del os.environ["XDG_CONFIG_HOME"]
    else:
        os.environ["XDG_CONFIG_HOME"] = old


@pytest.fixture(autouse=True)
def no_swarm_left_behind() -> Iterator[None]:
    """A stand-in run a test makes current (tests/channels/helpers.py: `FakeHost`) is current
    for that test alone, never for the tests after it on the same worker."""
    yield
    _swarm.set(None)


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test's evals on each async backend inspect supports."""
    monkeypatch.setenv("INSPECT_ASYNC_BACKEND", request.param)
    yield request.param


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engines",
        default="local",
        help="the swarm server engines the server tests run on, comma-separated: local, ray "
        "(ray runs a Ray cluster inside a network namespace this test process enters)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ray: a test of the Ray engine (runs with --engines ray)")


SERVER_HALF = ("client", "cli", "server", "sandbox/swarm_server", "security")
"""The folders whose test modules start servers of their own, shared by the module's tests."""


def _server_module(item: pytest.Item) -> str | None:
    """The test's module, relative to tests/, when it is in the server half."""
    module = item.path.relative_to(Path(__file__).parent).as_posix()
    return module if module.startswith(tuple(f"{folder}/" for folder in SERVER_HALF)) else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests of the engines asked for (`--engines`): a test's engine is its `engine`
    parameter, else ray for those marked so, else local.

    Under `--dist loadgroup` each module of the server half runs whole on one worker, so the
    servers it starts once serve all of its tests; those modules go first, as they take the
    longest, and the library's tests, spread one by one, fill the workers' last minutes."""
    engines = set(config.getoption("--engines").split(","))
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("engine") if callspec is not None else None
        if engine is None:
            engine = "ray" if item.get_closest_marker("ray") else "local"
        (kept if engine in engines else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    for item in kept:
        if (module := _server_module(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(module))
    kept.sort(key=lambda item: _server_module(item) is None)
    items[:] = kept


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A Ray head and two worker nodes (w1, w2: 8 CPUs and 8 GiB each) in a network
    namespace of this test process's own, which the process enters for the session (as
    root, with iproute2's `ip`: elsewhere the Ray tests are skipped)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("the Ray tests make a network namespace: they need root and `ip`")
    enter_own_network_namespace()
    cluster = start_cluster()
    yield cluster
    cluster.stop()
