import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test's evals on each async backend inspect supports."""
    monkeypatch.setenv("INSPECT_ASYNC_BACKEND", request.param)
    yield request.param


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
