"""The E2B tests' server (one for the folder), and the SDK pointed at it."""

import pytest

from ...e2b_servers import e2b_engine, e2b_env, e2b_server, provider_config, tests_dir

pytest.importorskip("e2b")

__all__ = ["e2b_engine", "e2b_env", "e2b_server", "provider_config", "tests_dir"]
