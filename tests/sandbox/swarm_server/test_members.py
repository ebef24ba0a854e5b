"""The members' per-member sandbox tests (tests/members/test_sandboxes.py), on swarm_server."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from inspect_swarm.sandbox import SwarmServerConfig, swarm_server

from ...members.test_sandboxes import (  # noqa: F401  (collected here, on this provider)
    Provider,
    test_a_member_sees_only_its_own_sandbox_and_its_services,
    test_a_members_files_are_its_own,
    test_environments_are_checked_when_the_swarm_starts,
    test_the_preamble_says_the_member_has_its_own_sandbox,
    test_the_spec_tests_pass_scorer_grades_each_members_sandbox,
)


@pytest.fixture
def tests_script(tests_dir: Path) -> Iterator[None]:
    """The spec's /tests/run.sh in every sandbox: the server exposes `tests_dir` there."""
    script = tests_dir / "run.sh"
    script.write_text("grep -qx 42 answer.txt\n")
    yield
    script.unlink()


@pytest.fixture
def provider(provider_config: SwarmServerConfig) -> Provider:
    return partial(swarm_server, api_url=provider_config.api_url, api_key=provider_config.api_key)
