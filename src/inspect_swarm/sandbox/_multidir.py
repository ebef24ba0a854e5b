from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inspect_ai.util import (
    ComposeConfig,
    ExecResult,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentSpec,
    parse_compose_yaml,
    sandboxenv,
)
from inspect_ai.util._sandbox.compose import COMPOSE_FILES, is_dockerfile
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment
from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import override

SANDBOX_TYPE = "multidir"

DEFAULT = "default"


class MultidirConfig(BaseModel):
    """The environments the `multidir` sandbox gives each sample.

    The environment named `default` is the sample's default; without one, the first
    listed is.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    environments: tuple[str, ...] = Field(default=(DEFAULT,), min_length=1)
    """Names of the environments (each a private working directory)."""

    @field_validator("environments")
    @classmethod
    def _check_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            _check_name(name)
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(
                f"environments lists {duplicates} more than once: give each environment once"
            )
        return names


def _check_name(name: str) -> None:
    if not name or ":" in name:
        raise ValueError(
            f"environment name {name!r} is not valid: use a non-empty name without ':' "
            "(sample files address an environment as 'name:path')"
        )


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
            return _default_first(config.environments, marked=None)
        case ComposeConfig():
            return _compose_names(config, source="the compose config")
        case str() if is_dockerfile(config):
            # a Dockerfile describes one image, so the sample gets one environment
            return [DEFAULT]
        case str():
            return _compose_names(parse_compose_yaml(config), source=repr(config))
        case _:
            raise ValueError(
                f"The multidir sandbox cannot use the config {config!r}: pass a compose "
                "file, MultidirConfig(environments=[...]) or multidir(...)."
            )


def _compose_names(compose: ComposeConfig, source: str) -> list[str]:
    names = list(compose.services)
    for name in names:
        _check_name(name)
    marked = [name for name, service in compose.services.items() if service.x_default]
    if len(marked) > 1:
        raise ValueError(
            f"Services {marked} of {source} all have 'x-default: true': mark one service only."
        )
    return _default_first(names, marked=marked[0] if marked else None)


def _default_first(names: Sequence[str], marked: str | None) -> list[str]:
    default = marked or (DEFAULT if DEFAULT in names else names[0])
    return [default, *(name for name in names if name != default)]


@sandboxenv(name=SANDBOX_TYPE)
class MultidirSandboxEnvironment(LocalSandboxEnvironment):
    """Several named environments per sample, each a private working directory.

    Configure it with a compose-style file (its service names; the service with
    `x-default: true` or named `default` comes first), a `MultidirConfig`, or
    nothing (one `default` environment). Sample files keyed `"name:path"` land in
    environment `name`.
    """

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
    def config_files(cls) -> list[str]:
        # compose files next to a task are found, and a docker task's compose config runs here
        return list(COMPOSE_FILES)

    @override
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return MultidirConfig.model_validate(config)

    @override
    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        # refuse a bad config when the task starts, not in its first sample
        environment_names(config)

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
