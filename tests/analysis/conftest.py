from pathlib import Path

import pytest

from .swarm_logs import build


@pytest.fixture(scope="session")
def arm_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the two arms' .eval logs."""
    log_dir = tmp_path_factory.mktemp("arms")
    build(log_dir)
    return log_dir


@pytest.fixture(scope="session")
def arm_json_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same arms, as .json logs."""
    log_dir = tmp_path_factory.mktemp("arms-json")
    build(log_dir, "json")
    return log_dir
