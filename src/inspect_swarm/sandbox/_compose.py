"""What the `multidir` and `swarm_server` sandboxes share: a sample's sandboxes are named
services, given by a compose file (as for Docker) or by the provider's own config."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from inspect_ai.util import (
    ComposeConfig,
    ComposeService,
    ComposeVolumeMount,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    parse_compose_yaml,
)
from inspect_ai.util._sandbox.compose import COMPOSE_FILES, is_dockerfile
from pydantic import AfterValidator, BaseModel, Field, ValidationInfo
from typing_extensions import override

DEFAULT = "default"


def _check_name(name: str, noun: str) -> None:
    """Refuse a name that sample files (keyed `"name:path"`) could not address."""
    if not name or ":" in name:
        raise ValueError(
            f"{noun} name {name!r} is not valid: use a non-empty name without ':' "
            "(sample files address an environment as 'name:path')"
        )


def _check_names(names: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
    # the field names the things in the messages: `environments`, `services`
    field = info.field_name or "names"
    noun = field.removesuffix("s")
    for name in names:
        _check_name(name, noun)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{field} lists {duplicates} more than once: give each {noun} once")
    return names


Names = Annotated[tuple[str, ...], Field(min_length=1), AfterValidator(_check_names)]
"""A config field naming a sample's sandboxes: at least one, each once, addressable."""


def default_first(names: Sequence[str], marked: str | None = None) -> list[str]:
    """The names with the default first: `marked`, else `default`, else the first."""
    default = marked or (DEFAULT if DEFAULT in names else names[0])
    return [default, *(name for name in names if name != default)]


def _compose(config: str | ComposeConfig) -> tuple[ComposeConfig, str]:
    """The compose config of a file or config, and how to name it in an error."""
    if isinstance(config, ComposeConfig):
        return config, "the compose config"
    return parse_compose_yaml(config, multiple_services=True), repr(config)


def compose_services(config: str | ComposeConfig, noun: str) -> dict[str, ComposeService]:
    """The services of a compose file or config in its order, the default first.

    The default is the service with `x-default: true`, else the one named `default`,
    else the first. A Dockerfile describes one image, so it gives one `default` service.
    """
    if is_dockerfile(config):
        return {DEFAULT: ComposeService()}
    compose, source = _compose(config)
    services = compose.services
    if not services:
        raise ValueError(f"{source} has no services: give it at least one service.")
    for name in services:
        _check_name(name, noun)
    marked = [name for name, service in services.items() if service.x_default]
    if len(marked) > 1:
        raise ValueError(
            f"Services {marked} of {source} all have 'x-default: true': mark one service only."
        )
    names = default_first(list(services), marked[0] if marked else None)
    return {name: services[name] for name in names}


@dataclass(frozen=True)
class VolumeMount:
    """A named volume that a service mounts."""

    volume: str
    target: str
    """Where the service sees it."""


def volume_mounts(config: str | ComposeConfig, noun: str) -> dict[str, list[VolumeMount]]:
    """The named volumes each service of a compose file or config mounts, by service in
    `compose_services()` order. Bind mounts, tmpfs and anonymous volumes are left out.

    Raises:
        ValueError: A service mounts a named volume the file does not declare.
    """
    if is_dockerfile(config):
        return {DEFAULT: []}
    compose, source = _compose(config)
    declared = set(compose.volumes or {})
    mounts: dict[str, list[VolumeMount]] = {}
    for name, service in compose_services(compose, noun).items():
        mounts[name] = []
        for spec in service.volumes or []:
            mount = _volume_mount(spec)
            if mount is None:
                continue
            if mount.volume not in declared:
                raise ValueError(
                    f"{noun.capitalize()} {name!r} of {source} mounts volume {mount.volume!r}, "
                    "which is not declared: add it under the top-level volumes: key."
                )
            mounts[name].append(mount)
    return mounts


def _volume_mount(spec: str | ComposeVolumeMount) -> VolumeMount | None:
    if isinstance(spec, str):
        source, _, rest = spec.partition(":")
        target = rest.split(":", 1)[0]
    elif spec.type in (None, "volume"):
        source, target = spec.source or "", spec.target or ""
    else:
        return None
    # a path is a bind mount, and a mount with no source an anonymous volume
    if not source or not target or source.startswith(("/", ".", "~")):
        return None
    return VolumeMount(source, target)


def refusal(sandbox_type: str, config: object, alternatives: str) -> ValueError:
    """The error for a config the provider cannot use."""
    return ValueError(
        f"The {sandbox_type} sandbox cannot use the config {config!r}: pass a compose "
        f"file, {alternatives}."
    )


class ComposeSandboxEnvironment(SandboxEnvironment):
    """A provider configured as Docker is (compose files, one sandbox per service) or by
    its own config model, `config_type`."""

    config_type: ClassVar[type[BaseModel]]

    @override
    @classmethod
    def config_files(cls) -> list[str]:
        # compose files next to a task are found, and a docker task's compose config runs here
        return list(COMPOSE_FILES)

    @override
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return cls.config_type.model_validate(config)

    @override
    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        # refuse a bad config when the task starts, not in its first sample
        cls._service_names(config)

    @classmethod
    @abc.abstractmethod
    def _service_names(cls, config: SandboxEnvironmentConfigType | None) -> list[str]:
        """The names of a sample's sandboxes, the default first (raises for a bad config)."""
