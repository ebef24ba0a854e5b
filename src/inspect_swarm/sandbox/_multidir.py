from __future__ import annotations

import dataclasses
from pathlib import Path

from inspect_ai.util import (
    ComposeConfig,
    ExecResult,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentSpec,
    sandboxenv,
)
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment
from pydantic import BaseModel, ConfigDict
from typing_extensions import override

from ._compose import (
    DEFAULT,
    ComposeSandboxEnvironment,
    Names,
    compose_services,
    default_first,
    refusal,
)

SANDBOX_TYPE = "multidir"


class MultidirConfig(BaseModel):
    """The environments the `multidir` sandbox gives each sample.

    The environment named `default` is the sample's default; without one, the first
    listed is.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    environments: Names = (DEFAULT,)
    """Names of the environments (each a private working directory)."""


def multidir(*environments: str) -> SandboxEnvironmentSpec:
    """The `multidir` sandbox with these environments, for `Task(sandbox=...)`.

    Each environment is a private working directory on this machine: commands run
    there as host processes, and relative file paths resolve there. It needs no
    Docker, and it isolates nothing beyond the working directory.

    Args:
        *environments: Names of the environments (default: one named `default`).
            The one named `default` is the default; without one, the first is.
    """
    config = MultidirConfig(environments=environments or (DEFAULT,))
    return SandboxEnvironmentSpec(SANDBOX_TYPE, config)


def environment_names(config: SandboxEnvironmentConfigType | None) -> list[str]:
    """The names of a sample's environments, the default first."""
    match config:
        case None:
            return [DEFAULT]
        case MultidirConfig():
            return default_first(config.environments)
        case str() | ComposeConfig():
            return list(compose_services(config, "environment"))
        case _:
            raise refusal(
                SANDBOX_TYPE, config, "MultidirConfig(environments=[...]) or multidir(...)"
            )


@sandboxenv(name=SANDBOX_TYPE)
class MultidirSandboxEnvironment(ComposeSandboxEnvironment, LocalSandboxEnvironment):
    """Several named environments per sample, each a private working directory.

    Configure it with a compose-style file (its service names; the service with
    `x-default: true` or named `default` comes first), a `MultidirConfig`, or
    nothing (one `default` environment). Sample files keyed `"name:path"` land in
    environment `name`.
    """

    config_type = MultidirConfig

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        """The environment's name."""

    @property
    def working_dir(self) -> Path:
        """The environment's private working directory."""
        return Path(self.directory.name)

    @override
    @classmethod
    def _service_names(cls, config: SandboxEnvironmentConfigType | None) -> list[str]:
        return environment_names(config)

    @override
    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        environments: dict[str, SandboxEnvironment] = {}
        try:
            for name in environment_names(config):
                environments[name] = cls(name)
        except BaseException:
            _remove_directories(environments)
            raise
        return environments

    @override
    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        try:
            await super().sample_cleanup(task_name, config, environments, interrupted)
        finally:
            # the inherited cleanup stops at the first environment an error or a
            # cancellation interrupts; every directory goes regardless
            _remove_directories(environments)

    @override
    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        result = await super().exec(cmd, input, cwd, env, user, timeout, timeout_retry, concurrency)
        if result.returncode < 0:
            # a process killed by signal N exits 128+N, as in a shell or a container
            return dataclasses.replace(result, returncode=128 - result.returncode)
        return result


def _remove_directories(environments: dict[str, SandboxEnvironment]) -> None:
    for environment in environments.values():
        environment.as_type(MultidirSandboxEnvironment).directory.cleanup()
