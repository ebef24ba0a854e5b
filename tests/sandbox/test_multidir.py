import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog
from inspect_ai.log._samples import sample_active
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import SandboxEnvironment, sandbox, store
from inspect_ai.util._sandbox.context import sandbox_environments_context_var
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403  (inspect's conformance suite)

from inspect_swarm.sandbox import MultidirConfig, MultidirSandboxEnvironment, multidir
from inspect_swarm.sandbox._multidir import environment_names

pytestmark = pytest.mark.anyio

# --- inspect's sandbox conformance suite, run on one multidir environment -----------------

# root ignores permission bits, so checks that expect a refusal cannot pass as root
ROOT_FAILURES = {
    "test_read_file_not_allowed": "root reads files whatever their mode",
    "test_write_text_file_without_permissions": "root writes files whatever their mode",
    "test_write_binary_file_without_permissions": "root writes files whatever their mode",
}


@pytest.fixture
async def sandbox_env(request: pytest.FixtureRequest) -> AsyncIterator[SandboxEnvironment]:
    if os.geteuid() == 0 and (why := ROOT_FAILURES.get(request.node.originalname)):
        request.applymarker(pytest.mark.xfail(reason=why, strict=True))
    envs = await MultidirSandboxEnvironment.sample_init("self_check", multidir("default", "other").config, {})
    yield envs["default"]
    await MultidirSandboxEnvironment.sample_cleanup("self_check", None, envs, False)
