import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("INSPECT_DISPLAY", "none")
# the examples are importable, so tests run them as written
sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test's evals on each async backend inspect supports."""
    monkeypatch.setenv("INSPECT_ASYNC_BACKEND", request.param)
    yield request.param


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that boot isolated sandboxes on one worker.

    Each of them starts a swarm server whose sandboxes fill the machine's 2 cores; two such
    tests side by side starve each other past their time limits.
    """
    for item in items:
        parts = set(Path(item.fspath).parts)
        if {"server", "e2b"} & parts:
            item.add_marker(pytest.mark.xdist_group("sandboxes"))
        if "e2b" in parts:
            # the E2B end-to-end tests occasionally time out on a loaded 2-core machine (a
            # request the server answers late); a failure that repeats is still a failure
            item.add_marker(pytest.mark.flaky(reruns=2, reruns_delay=1))
