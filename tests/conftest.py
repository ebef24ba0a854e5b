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
