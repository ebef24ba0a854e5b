"""Inspect's own sandbox conformance suite, through the swarm_server provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from inspect_ai.util import SandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403  (inspect's conformance suite)

from inspect_swarm.sandbox import SwarmServerConfig, SwarmServerSandboxEnvironment

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    # the suite is backend-neutral; the evals in test_swarm.py run on both backends
    return "asyncio"


@pytest.fixture
async def sandbox_env(provider_config: SwarmServerConfig) -> AsyncIterator[SandboxEnvironment]:
    envs = await SwarmServerSandboxEnvironment.sample_init("self_check", provider_config, {})
    yield envs["default"]
    await SwarmServerSandboxEnvironment.sample_cleanup("self_check", provider_config, envs, False)
