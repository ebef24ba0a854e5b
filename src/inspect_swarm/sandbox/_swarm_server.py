"""The `swarm_server` sandbox provider: each of a sample's sandboxes on a swarm server, or on
any E2B-compatible server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx
from inspect_ai.util import (
    ComposeConfig,
    ComposeService,
    ExecResult,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentSpec,
    sandboxenv,
)
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from ._compose import (
    DEFAULT,
    ComposeSandboxEnvironment,
    Names,
    compose_services,
    default_first,
    refusal,
    volume_mounts,
)
from ._connection import Connection, find_server
from ._e2b_client import ControlPlane, ExecFailed, SandboxDaemon

SANDBOX_TYPE = "swarm_server"

# every sandbox this process makes carries these, so cleanup finds them after a crash
_PROVIDER_KEY = "inspect_provider"
_RUN_KEY = "inspect_run"
_RUN_ID = uuid.uuid4().hex


class SwarmServerConfig(BaseModel):
    """Where the `swarm_server` sandbox makes a sample's sandboxes, and which.

    Unset connection fields come from the environment (`E2B_API_URL` or `E2B_DOMAIN` with
    `E2B_API_KEY`; else a lease on the hosted swarm server of `MARITIME_API_KEY`); with
    none, a swarm server is started on this machine.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    services: Names = (DEFAULT,)
    """Names of the sandboxes of each sample (ignored when `compose` is given)."""

    compose: str | ComposeConfig | None = None
    """A compose file (or config) whose services name the sandboxes (template from
    `x-e2b.template`, working directory from `working_dir`, default from `x-default`)."""

    api_url: str | None = None
    """The E2B-compatible API, such as `http://127.0.0.1:8767`."""

    sandbox_url: str | None = None
    """One address for every sandbox's daemon, routed by header (default: `api_url` when
    given, else `https://49983-<id>.<domain>`)."""

    domain: str | None = None
    """The E2B domain of a hosted server."""

    api_key: str | None = None
    """The E2B API key (an account key, a lease's `mlk_` key, or inside a sandbox its own key)."""

    template: str = "base"
    """The template of services that name none."""

    timeout: int = Field(default=6 * 3600, ge=1)
    """Seconds a sandbox lives at most, should its sample never clean it up."""

    default_user: Literal["user", "root"] = "user"
    """Who commands and file operations run as unless told otherwise (a compose service's
    `user`, `root` or `user`, does for its sandboxes)."""


def swarm_server(*services: str, **options: Any) -> SandboxEnvironmentSpec:
    """The `swarm_server` sandbox with these sandboxes per sample, for `Task(sandbox=...)`.

    Each sandbox is an isolated sandbox on a swarm server (or any E2B-compatible server),
    so per-member sandboxes need no Docker.

    Args:
        *services: Names of the sandboxes (default: one named `default`). The one named
            `default` is the sample's default; without one, the first is.
        **options: Further `SwarmServerConfig` fields (`api_url`, `api_key`, `template`...).

    Returns:
        The sandbox spec.

    Raises:
        ValueError: A bad name or option (a pydantic `ValidationError`).
    """
    config = SwarmServerConfig(services=services or (DEFAULT,), **options)
    return SandboxEnvironmentSpec(SANDBOX_TYPE, config)


@dataclass(frozen=True)
class _Service:
    name: str
    template: str
    working_dir: str | None
    user: str


_USERS = ("user", "root")


def _services(config: SwarmServerConfig) -> list[_Service]:
    """The sandboxes of each sample, the default first."""
    if config.compose is None:
        return [
            _Service(name, config.template, None, config.default_user)
            for name in default_first(config.services)
        ]
    services = compose_services(config.compose, "service")
    _refuse_shared_volumes(config.compose)
    return [
        _Service(
            name,
            _template(service, config.template),
            service.working_dir,
            _user(name, service, config.default_user),
        )
        for name, service in services.items()
    ]


def _user(name: str, service: ComposeService, default: str) -> str:
    """Who a service's commands and file operations run as: its compose `user`, if any."""
    if service.user is None:
        return default
    if service.user not in _USERS:
        raise ValueError(
            f"swarm_server: service {name!r} has user {service.user!r}, and its sandboxes run "
            f"as {' or '.join(_USERS)}. Set user: root or user: user (or leave it out for "
            f"SwarmServerConfig.default_user, {default!r})."
        )
    return service.user


def _refuse_shared_volumes(compose: str | ComposeConfig) -> None:
    """Each sandbox has a filesystem of its own, so a volume two services share cannot be."""
    users: dict[str, list[str]] = {}
    for name, mounts in volume_mounts(compose, "service").items():
        for mount in mounts:
            users.setdefault(mount.volume, []).append(name)
    for volume, names in users.items():
        if len(set(names)) > 1:
            raise ValueError(
                f"swarm_server: volume {volume!r} is mounted by services {names}, and each "
                "sandbox on a swarm server has a filesystem of its own, so they cannot share "
                "it. Run the task on the docker or multidir sandbox, or give each service its "
                "own volume."
            )


def _template(service: ComposeService, default: str) -> str:
    extension = service.extensions.get("x-e2b") or {}
    return str(extension.get("template", default))


def _as_config(config: SandboxEnvironmentConfigType | None) -> SwarmServerConfig:
    match config:
        case None:
            return SwarmServerConfig()
        case SwarmServerConfig():
            return config
        case str() | ComposeConfig():
            return SwarmServerConfig(compose=config)
        case _:
            raise refusal(SANDBOX_TYPE, config, "SwarmServerConfig(...) or swarm_server(...)")


_CREATE_SECONDS = 30.0


async def _server(config: SwarmServerConfig) -> Connection:
    """The server the config, else the environment, names (see `find_server`)."""
    return await find_server(config.api_url, config.api_key, config.sandbox_url, config.domain)


@sandboxenv(name=SANDBOX_TYPE)
class SwarmServerSandboxEnvironment(ComposeSandboxEnvironment):
    """One sandbox of a sample on a swarm server or any E2B-compatible server.

    Each compose service (or configured name) is a sandbox of its own, so per-member
    sandboxes and shared services such as a comparator work without Docker. Services
    reach each other only through the provider, not over a network by name.

    The provider makes these in `sample_init()`; a task does not construct them.

    Args:
        name: The sandbox's service name.
        sandbox_id: The sandbox's id on its server.
        server: The server's control plane.
        daemon: The client of the sandbox's daemon (processes and files).
        working_dir: The service's working directory, if it has one.
    """

    config_type = SwarmServerConfig
    """The provider's own config model, `SwarmServerConfig`."""

    def __init__(
        self,
        name: str,
        sandbox_id: str,
        server: ControlPlane,
        daemon: SandboxDaemon,
        working_dir: str | None,
    ) -> None:
        super().__init__()
        self.name = name
        """The sandbox's service name."""
        self.sandbox_id = sandbox_id
        """The sandbox's id on its server."""
        self._server = server
        self._daemon = daemon
        self._working_dir = working_dir

    @override
    @classmethod
    def _service_names(cls, config: SandboxEnvironmentConfigType | None) -> list[str]:
        return [service.name for service in _services(_as_config(config))]

    @override
    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        """Check the config and start or find the server, when the task starts.

        Args:
            task_name: The task's name.
            config: A compose file or config, a `SwarmServerConfig`, or `None`.

        Raises:
            ValueError: A config the provider cannot use.
        """
        await super().task_init(task_name, config)
        # start or find the server when the task starts
        await _server(_as_config(config))

    @override
    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        """Create one sandbox on the server for each of the sample's services, at once.

        A create finishes even when the sample is cancelled while it is in flight (within a
        bounded time), so no sandbox is left on the server unknown; when one create fails,
        the sandboxes already made are ended.

        Args:
            task_name: The task's name, kept in each sandbox's metadata.
            config: The sample's config.
            metadata: The sample's metadata (unused).

        Returns:
            The sandboxes by service name, the default first.

        Raises:
            RuntimeError: The server refused a sandbox or did not create it in time.
        """
        resolved = _as_config(config)
        services = _services(resolved)
        connection = await _server(resolved)
        client = httpx.AsyncClient(timeout=httpx.Timeout(60, read=None))
        server = ControlPlane(connection, client)
        created: dict[str, SwarmServerSandboxEnvironment] = {}

        async def create(service: _Service) -> None:
            # shielded (for a bounded time): a create cancelled in flight could still make a
            # sandbox on the server that this sample would never learn of, and so never end
            deadline = anyio.current_time() + _CREATE_SECONDS
            with anyio.CancelScope(shield=True, deadline=deadline) as scope:
                made = await server.create(
                    service.template, resolved.timeout, _metadata(task_name, service.name)
                )
            if scope.cancelled_caught:
                raise RuntimeError(
                    f"The server did not create the sandbox for service {service.name!r} within "
                    f"{_CREATE_SECONDS:.0f} s; check that it has memory to book."
                )
            sandbox_id = made["sandboxID"]
            daemon = SandboxDaemon(
                client,
                connection.envd_url(sandbox_id, made.get("domain")),
                sandbox_id,
                made.get("envdAccessToken"),
                service.user,
            )
            env = cls(service.name, sandbox_id, server, daemon, service.working_dir)
            created[service.name] = env
            if service.working_dir:
                await env._make_working_dir(service.working_dir, service.user)

        try:
            async with anyio.create_task_group() as tg:
                for service in services:
                    tg.start_soon(create, service)
        except BaseException:
            await _end(server, list(created.values()))
            raise
        return {service.name: created[service.name] for service in services}

    @override
    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        """End the sample's sandboxes on the server, even when the sample was cancelled.

        Args:
            task_name: The task's name.
            config: The sample's config.
            environments: The sandboxes `sample_init()` made.
            interrupted: Whether the sample was interrupted.
        """
        ours = [env.as_type(cls) for env in environments.values()]
        if ours:
            await _end(ours[0]._server, ours)

    @override
    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        """End any sandbox this process made for the task and left on the server.

        Args:
            task_name: The task's name.
            config: The task's config.
            cleanup: Whether to clean up; `False` (`--no-sandbox-cleanup`) leaves them.
        """
        if cleanup:
            await _kill_all(_as_config(config), {_RUN_KEY: _RUN_ID, "inspect_task": task_name})

    @override
    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """End sandboxes on the configured server, for `inspect sandbox cleanup swarm_server`.

        Args:
            id: The sandbox to end, or `None` for every sandbox this provider made there.
        """
        config = SwarmServerConfig()
        if id is not None:
            await _kill_all(config, {}, [id])
        else:
            await _kill_all(config, {_PROVIDER_KEY: SANDBOX_TYPE})

    # commands

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
        """Run a command in the sandbox, through its daemon.

        Args:
            cmd: The program and its arguments.
            input: What the command reads on its standard input.
            cwd: The directory to run in: absolute, or relative to the working directory (the
                user's home when the service has none).
            env: Environment variables for the command.
            user: The user to run as, such as `root`; `None` for the sandbox's default user.
            timeout: Seconds after which the command is stopped.
            timeout_retry: Part of the sandbox interface; a command is not retried.
            concurrency: Part of the sandbox interface; the server runs the command.

        Returns:
            The command's exit status and output.

        Raises:
            ValueError: `cmd` is empty.
            TimeoutError: The command ran past `timeout`.
            PermissionError: The program is not executable.
            OutputLimitExceededError: An output stream passed inspect_ai's limit.
        """
        if not cmd:
            raise ValueError("exec: cmd is empty; pass the program and its arguments")
        process: dict[str, Any] = {"cmd": cmd[0], "args": cmd[1:], "envs": env or {}}
        if cwd is not None or self._working_dir is not None:
            process["cwd"] = self._path(cwd or ".")
        data = input.encode() if isinstance(input, str) else input
        try:
            code, out, err = await self._daemon.run(process, data, user, timeout)
        except ExecFailed as ex:
            return ExecResult(False, 1, "", str(ex))
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        if code == 126 and "Permission denied" in stderr:
            raise PermissionError(f"cannot execute {cmd[0]!r}: {stderr.strip()}")
        return ExecResult(code == 0, code, stdout, stderr)

    # files

    @override
    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write a file in the sandbox, as its default user.

        Args:
            file: The file's path: absolute, or relative to the working directory (the
                user's home when the service has none).
            contents: Text (written as UTF-8) or bytes.

        Raises:
            PermissionError: The default user may not write there.
            IsADirectoryError: The path is a directory.
        """
        data = contents.encode() if isinstance(contents, str) else contents
        await self._daemon.write_file(self._path(file), data)

    @override
    async def read_file(self, file: str, text: bool = True) -> str | bytes:  # type: ignore[override]
        """Read a file in the sandbox, as its default user.

        Args:
            file: The file's path: absolute, or relative to the working directory (the
                user's home when the service has none).
            text: Whether to decode the file as UTF-8 text.

        Returns:
            The file's text, or its bytes when `text` is False.

        Raises:
            FileNotFoundError: No file at the path.
            PermissionError: The default user may not read it.
            OutputLimitExceededError: The file is larger than inspect_ai's limit.
        """
        data = await self._daemon.read_file(self._path(file))
        return data.decode() if text else data

    # helpers

    def _path(self, path: str) -> str:
        """Relative paths are under the working directory (else the user's home)."""
        if self._working_dir is None or path.startswith("/"):
            return path
        return os.path.normpath(f"{self._working_dir}/{path}")

    async def _make_working_dir(self, directory: str, owner: str) -> None:
        result = await self.exec(
            ["sh", "-c", f'mkdir -p "$1" && chown {owner}:{owner} "$1"', "sh", directory],
            cwd="/",
            user="root",
        )
        if not result.success:
            raise RuntimeError(f"cannot make working_dir {directory!r}: {result.stderr}")


def _metadata(task_name: str, service: str) -> dict[str, str]:
    """What every sandbox of this process carries, so that cleanup finds it."""
    return {
        _PROVIDER_KEY: SANDBOX_TYPE,
        _RUN_KEY: _RUN_ID,
        "inspect_task": task_name,
        "inspect_service": service,
    }


async def _end(server: ControlPlane, environments: list[SwarmServerSandboxEnvironment]) -> None:
    """End a sample's sandboxes, and its client (a cancelled sample still ends them)."""
    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:
            for env in environments:
                tg.start_soon(server.kill, env.sandbox_id)
        await server.aclose()


async def _kill_all(
    config: SwarmServerConfig, metadata: Mapping[str, str], ids: list[str] | None = None
) -> None:
    """Kill the given sandboxes, or every sandbox with `metadata`, on the configured server."""
    connection = await _server(config)
    async with httpx.AsyncClient(timeout=60) as client:
        server = ControlPlane(connection, client)
        targets = ids if ids is not None else await server.list(metadata)
        async with anyio.create_task_group() as tg:
            for sandbox_id in targets:
                tg.start_soon(server.kill, sandbox_id)
