"""How `multidir` and `swarm_server` read a config into a sample's sandbox names: the same way.

No sandbox starts here: the names come from the config alone (the providers' sandboxes are
tested in test_multidir.py and tests/sandbox/swarm_server).
"""

from pathlib import Path

import pytest
from inspect_ai.util import ComposeConfig, SandboxEnvironmentConfigType

from inspect_swarm.sandbox import (
    MultidirConfig,
    MultidirSandboxEnvironment,
    SwarmServerConfig,
    SwarmServerSandboxEnvironment,
    swarm_server,
)
from inspect_swarm.sandbox._compose import ComposeSandboxEnvironment
from inspect_swarm.sandbox._swarm_server import _Service, _services

PROVIDERS: list[type[ComposeSandboxEnvironment]] = [
    MultidirSandboxEnvironment,
    SwarmServerSandboxEnvironment,
]

THREE = (
    "services:\n"
    "  alice: {image: python:3.12}\n"
    "  checker: {image: python:3.12, x-default: true}\n"
    "  bob: {image: python:3.12}\n"
)


@pytest.fixture(params=PROVIDERS, ids=["multidir", "swarm_server"])
def provider(request: pytest.FixtureRequest) -> type[ComposeSandboxEnvironment]:
    provider: type[ComposeSandboxEnvironment] = request.param
    return provider


def compose_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    return str(path)


def test_compose_file_gives_its_services_default_first(
    provider: type[ComposeSandboxEnvironment], tmp_path: Path
) -> None:
    names = provider._service_names(compose_file(tmp_path, THREE))
    assert names == ["checker", "alice", "bob"]


def test_compose_config_gives_its_services_default_first(
    provider: type[ComposeSandboxEnvironment],
) -> None:
    compose = ComposeConfig.model_validate(
        {"services": {"a": {}, "default": {}, "b": {"image": "python:3.12"}}}
    )
    assert provider._service_names(compose) == ["default", "a", "b"]


@pytest.mark.parametrize("file", ["Dockerfile", "checker.Dockerfile"])
def test_a_dockerfile_gives_one_default(
    provider: type[ComposeSandboxEnvironment], tmp_path: Path, file: str
) -> None:
    assert provider._service_names(str(tmp_path / file)) == ["default"]


def test_no_config_gives_one_default(provider: type[ComposeSandboxEnvironment]) -> None:
    assert provider._service_names(None) == ["default"]


@pytest.mark.parametrize(
    ("names", "expected"),
    [(["w-1", "default"], ["default", "w-1"]), (["w-1", "w-2"], ["w-1", "w-2"])],
)
def test_named_default_comes_first_else_the_first(names: list[str], expected: list[str]) -> None:
    configs: list[SandboxEnvironmentConfigType] = [
        MultidirConfig(environments=tuple(names)),
        SwarmServerConfig(services=tuple(names)),
    ]
    for provider, config in zip(PROVIDERS, configs, strict=True):
        assert provider._service_names(config) == expected


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "services:\n  a: {x-default: true}\n  b: {x-default: true}\n",
            r"Services \['a', 'b'\] of '.*compose.yaml' all have 'x-default: true': mark one",
        ),
        ("services: {}\n", r"'.*compose.yaml' has no services: give it at least one service"),
    ],
)
async def test_a_bad_compose_file_is_refused_when_the_task_starts(
    provider: type[ComposeSandboxEnvironment], tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await provider.task_init("task", compose_file(tmp_path, text))


@pytest.mark.anyio
async def test_another_providers_config_is_refused_when_the_task_starts(
    provider: type[ComposeSandboxEnvironment],
) -> None:
    other = SwarmServerConfig() if provider is MultidirSandboxEnvironment else MultidirConfig()
    with pytest.raises(ValueError, match=r"sandbox cannot use the config .*: pass a compose file"):
        await provider.task_init("task", other)


@pytest.mark.parametrize(
    ("services", "message"),
    [
        (["a", "b", "a"], r"services lists \['a'\] more than once: give each service once"),
        (["default", "x:y"], "service name 'x:y' is not valid: use a non-empty name without ':'"),
        ([""], "service name '' is not valid"),
    ],
)
def test_bad_service_names_are_refused(services: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        swarm_server(*services)


def test_server_services_take_template_working_dir_and_user_from_compose(tmp_path: Path) -> None:
    text = (
        "services:\n"
        "  agent: {working_dir: /work, x-e2b: {template: python}, user: root}\n"
        "  default: {image: python:3.12, volumes: [own:/data]}\n"
        "volumes: {own: {}}\n"
    )
    config = SwarmServerConfig(compose=compose_file(tmp_path, text), template="base")
    assert _services(config) == [
        _Service("default", "base", None, "user"),
        _Service("agent", "python", "/work", "root"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "services:\n  a: {volumes: [v:/x]}\n  b: {volumes: [v:/y]}\nvolumes: {v: {}}\n",
            r"volume 'v' is mounted by services \['a', 'b'\], and each sandbox",
        ),
        ("services:\n  a: {user: '1000:1000'}\n", "service 'a' has user '1000:1000'"),
        ("services:\n  a: {volumes: [v:/x]}\n", "mounts volume 'v', which is not declared"),
    ],
)
def test_server_layouts_it_cannot_give_are_refused(text: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        SwarmServerSandboxEnvironment._service_names(compose_file(tmp_path, text))


def test_a_server_config_with_a_compose_config_survives_the_log() -> None:
    compose = ComposeConfig.model_validate({"services": {"a": {}, "b": {}}})
    config = SwarmServerConfig(compose=compose, template="python")
    restored = SwarmServerSandboxEnvironment.config_deserialize(config.model_dump())
    assert restored == config
    assert isinstance(restored, SwarmServerConfig)
    assert SwarmServerSandboxEnvironment._service_names(restored) == ["a", "b"]
