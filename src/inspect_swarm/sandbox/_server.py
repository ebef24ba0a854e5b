from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
from anyio.abc import TaskGroup
from inspect_ai.util import (
    ComposeConfig,
    ComposeService,
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
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

SANDBOX_TYPE = "swarm_server"

ENVD_PORT = 49983

# every sandbox this process makes carries these, so cleanup finds them after a crash
_PROVIDER_KEY = "inspect_provider"
_RUN_KEY = "inspect_run"
_RUN_ID = uuid.uuid4().hex

_INPUT_CHUNK = 1024 * 1024
_CLIENT_GRACE_SECONDS = 10
_SERVER_START_SECONDS = 60
_PR_SET_PDEATHSIG = 1


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


# --- where the server is ---------------------------------------------------------------


@dataclass(frozen=True)
class _Connection:
    api_url: str
    api_key: str
    sandbox_url: str | None
    domain: str | None

    def envd_url(self, sandbox_id: str, domain: str | None) -> str:
        if self.sandbox_url:
            return self.sandbox_url
        return f"https://{ENVD_PORT}-{sandbox_id}.{domain or self.domain}"


class _LocalServer:
    """The swarm server this process starts when no server is configured.

    Started from the event loop's thread and told to die with it (PR_SET_PDEATHSIG follows
    the forking thread), so it, and every sandbox on it, ends with the eval even after a
    crash; it is reused by later tasks of the process and stopped at exit.
    """

    process: subprocess.Popen[bytes] | None = None
    connection: _Connection | None = None

    @classmethod
    async def get(cls) -> _Connection:
        if cls.process is not None and cls.process.poll() is None and cls.connection:
            return cls.connection
        state = Path(tempfile.mkdtemp(prefix="inspect-swarm-server-"))
        ready = state / "ready.json"
        # the server makes its key and gives it in the ready file (0600): a key on the
        # command line would be in /proc/<pid>/cmdline for every user of the machine
        command = [sys.executable, "-m", "inspect_swarm.server._cli", "server", "--port", "0"]
        command += ["--ready-file", str(ready), "--state-dir", str(state / "state")]
        with (state / "server.log").open("wb") as log:
            # forked from the loop's thread on purpose: the server dies with that thread
            process = subprocess.Popen(  # noqa: ASYNC220
                command, stdout=log, stderr=log, preexec_fn=_die_with_parent
            )
        cls.process, cls.connection = process, None
        atexit.register(_stop_server, process, state)
        with anyio.move_on_after(_SERVER_START_SECONDS):
            while process.poll() is None:
                if ready.exists() and (text := ready.read_text()):
                    found = json.loads(text)
                    url, key = found["url"], found["apiKey"]
                    cls.connection = _Connection(url, key, url, None)
                    return cls.connection
                await anyio.sleep(0.05)
        process.kill()
        raise RuntimeError(f"The local swarm server did not start; see {state / 'server.log'}")


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _stop_server(process: subprocess.Popen[bytes], state: Path) -> None:
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    shutil.rmtree(state, ignore_errors=True)


async def _connection(config: SwarmServerConfig) -> _Connection:
    """The server to use: the config's, the environment's, a hosted lease's, or our own."""
    env = os.environ
    api_key = config.api_key or env.get("E2B_API_KEY")
    domain = config.domain or env.get("E2B_DOMAIN")
    api_url = config.api_url or env.get("E2B_API_URL") or (domain and f"https://api.{domain}")
    if api_url:
        if not api_key:
            raise ValueError(
                f"The swarm_server sandbox has the server {api_url} but no key: set "
                "E2B_API_KEY or SwarmServerConfig(api_key=...)."
            )
        sandbox_url = config.sandbox_url or env.get("E2B_SANDBOX_URL") or config.api_url
        return _Connection(api_url, api_key, sandbox_url, domain)
    if env.get("MARITIME_API_KEY"):
        return await _hosted_lease()
    return await _LocalServer.get()


async def _hosted_lease() -> _Connection:
    """A lease on the hosted swarm server of `MARITIME_API_KEY` (its variables say where)."""
    from inspect_swarm.server import AsyncSwarmsClient

    async with AsyncSwarmsClient() as client:
        lease = await client.servers.lease()
    env: dict[str, str] = lease.get("env") or {}
    domain = env.get("E2B_DOMAIN")
    api_url = env.get("E2B_API_URL") or f"https://api.{domain}"
    return _Connection(api_url, env["E2B_API_KEY"], env.get("E2B_SANDBOX_URL"), domain)


# --- the wire ---------------------------------------------------------------------------


class _Api:
    """The E2B control plane."""

    def __init__(self, connection: _Connection, client: httpx.AsyncClient) -> None:
        self.connection = connection
        self._client = client

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"X-API-KEY": self.connection.api_key}
        url = self.connection.api_url.rstrip("/") + path
        response = await self._client.request(method, url, headers=headers, **kwargs)
        if response.status_code >= 400 and response.status_code != 404:
            raise RuntimeError(
                f"{method} {url} failed ({response.status_code}): {_message(response)}"
            )
        return response

    async def create(self, service: _Service, config: SwarmServerConfig, task: str) -> Any:
        metadata = {_PROVIDER_KEY: SANDBOX_TYPE, _RUN_KEY: _RUN_ID, "inspect_task": task}
        body = {
            "templateID": service.template,
            "timeout": config.timeout,
            "metadata": {**metadata, "inspect_service": service.name},
        }
        return (await self._call("POST", "/v2/sandboxes", json=body)).json()

    async def kill(self, sandbox_id: str) -> None:
        await self._call("DELETE", f"/sandboxes/{sandbox_id}")

    async def list(self, metadata: Mapping[str, str]) -> list[str]:
        query = "&".join(f"{k}={v}" for k, v in metadata.items())
        response = await self._call("GET", "/v2/sandboxes", params={"metadata": query})
        return [item["sandboxID"] for item in response.json()]


def _message(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return str(body["message"])
    return response.text


def _envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message).encode()
    return bytes([flags]) + len(data).to_bytes(4, "big") + data


async def _envelopes(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """(flags, message) of each message of a Connect stream."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while len(buffer) >= 5:
            size = int.from_bytes(buffer[1:5], "big")
            if len(buffer) < 5 + size:
                break
            yield buffer[0], json.loads(buffer[5 : 5 + size] or b"{}")
            buffer = buffer[5 + size :]


class _ExecFailed(Exception):
    """The daemon refused to run the command (a Connect error before it started)."""


# --- the provider -----------------------------------------------------------------------


_CREATE_SECONDS = 30.0


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
        api: The server's control plane.
        envd_url: The address of the sandbox's daemon.
        token: The daemon's access token, if the server gave one.
        working_dir: The service's working directory, if it has one.
        default_user: Who commands and file operations run as unless told otherwise.
    """

    config_type = SwarmServerConfig
    """The provider's own config model, `SwarmServerConfig`."""

    def __init__(
        self,
        name: str,
        sandbox_id: str,
        api: _Api,
        envd_url: str,
        token: str | None,
        working_dir: str | None,
        default_user: str,
    ) -> None:
        super().__init__()
        self.name = name
        """The sandbox's service name."""
        self.sandbox_id = sandbox_id
        """The sandbox's id on its server."""
        self._api = api
        self._envd_url = envd_url.rstrip("/")
        self._token = token
        self._working_dir = working_dir
        self._default_user = default_user

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
        await _connection(_as_config(config))

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
        connection = await _connection(resolved)
        api = _Api(connection, httpx.AsyncClient(timeout=httpx.Timeout(60, read=None)))
        created: dict[str, SwarmServerSandboxEnvironment] = {}

        async def create(service: _Service) -> None:
            # shielded (for a bounded time): a create cancelled in flight could still make a
            # sandbox on the server that this sample would never learn of, and so never end
            deadline = anyio.current_time() + _CREATE_SECONDS
            with anyio.CancelScope(shield=True, deadline=deadline) as scope:
                made = await api.create(service, resolved, task_name)
            if scope.cancelled_caught:
                raise RuntimeError(
                    f"The server did not create the sandbox for service {service.name!r} within "
                    f"{_CREATE_SECONDS:.0f} s; check that it has memory to book."
                )
            env = cls(
                service.name,
                made["sandboxID"],
                api,
                connection.envd_url(made["sandboxID"], made.get("domain")),
                made.get("envdAccessToken"),
                service.working_dir,
                service.user,
            )
            created[service.name] = env
            if service.working_dir:
                await env._make_working_dir(service.working_dir)

        try:
            async with anyio.create_task_group() as tg:
                for service in services:
                    tg.start_soon(create, service)
        except BaseException:
            await cls._end(list(created.values()))
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
        await cls._end([env.as_type(cls) for env in environments.values()])

    @classmethod
    async def _end(cls, environments: list[SwarmServerSandboxEnvironment]) -> None:
        # a cancelled sample still ends its sandboxes
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for env in environments:
                    tg.start_soon(env._api.kill, env.sandbox_id)
            if environments:
                await environments[0]._api._client.aclose()

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
        headers = self._headers(user) | {"Content-Type": "application/connect+json"}
        if timeout is not None:
            headers["Connect-Timeout-Ms"] = str(timeout * 1000)
        output = {"stdout": bytearray(), "stderr": bytearray()}
        try:
            with anyio.fail_after(None if timeout is None else timeout + _CLIENT_GRACE_SECONDS):
                end = await self._run(process, data, headers, output)
        except _ExecFailed as ex:
            return ExecResult(False, 1, "", str(ex))
        stdout, stderr = (output[s].decode(errors="replace") for s in ("stdout", "stderr"))
        code = _returncode(end)
        if code == 126 and "Permission denied" in stderr:
            raise PermissionError(f"cannot execute {cmd[0]!r}: {stderr.strip()}")
        return ExecResult(code == 0, code, stdout, stderr)

    async def _run(
        self,
        process: dict[str, Any],
        data: bytes | None,
        headers: dict[str, str],
        output: dict[str, bytearray],
    ) -> dict[str, Any]:
        """Start the command, feed its input and collect its output; its end event."""
        body = _envelope({"process": process, "stdin": data is not None})
        url = f"{self._envd_url}/process.Process/Start"
        failure: Exception | None = None
        async with (
            anyio.create_task_group() as tg,
            self._api._client.stream("POST", url, content=body, headers=headers) as response,
        ):
            # raised here, an error would reach the caller wrapped in an exception group
            try:
                return await self._follow(response, data, output, tg)
            except Exception as ex:
                failure = ex
                tg.cancel_scope.cancel()
        assert failure is not None
        raise failure

    async def _follow(
        self,
        response: httpx.Response,
        data: bytes | None,
        output: dict[str, bytearray],
        tg: TaskGroup,
    ) -> dict[str, Any]:
        if response.status_code != 200:
            await response.aread()
            raise _ExecFailed(_message(response))
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        async for flags, message in _envelopes(response.aiter_bytes()):
            if flags & 2:
                _raise_end_of_stream(message)
            event = message.get("event", {})
            if "start" in event and data is not None:
                tg.start_soon(self._feed, int(event["start"]["pid"]), data)
            elif "data" in event:
                for stream, chunk in event["data"].items():
                    output[stream] += base64.b64decode(chunk)
                    if len(output[stream]) > limit:
                        raise OutputLimitExceededError(
                            SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                            output[stream][:limit].decode(errors="replace"),
                        )
            elif "end" in event:
                return dict(event["end"])
        raise RuntimeError(f"the sandbox {self.sandbox_id} ended the command's stream early")

    async def _feed(self, pid: int, data: bytes) -> None:
        """Send stdin in chunks under the daemon's message limit, then close it."""
        selector = {"pid": pid}

        async def messages() -> AsyncIterator[bytes]:
            yield _envelope({"start": {"process": selector}})
            for at in range(0, len(data), _INPUT_CHUNK):
                chunk = base64.b64encode(data[at : at + _INPUT_CHUNK]).decode()
                yield _envelope({"data": {"input": {"stdin": chunk}}})
            yield _envelope({}, flags=2)

        client = self._api._client
        headers = self._headers(None)
        stream_headers = headers | {"Content-Type": "application/connect+json"}
        url = f"{self._envd_url}/process.Process"
        await client.post(f"{url}/StreamInput", content=messages(), headers=stream_headers)
        close_headers = headers | {"Content-Type": "application/json"}
        body = json.dumps({"process": selector})
        await client.post(f"{url}/CloseStdin", content=body, headers=close_headers)

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
        response = await self._api._client.post(
            f"{self._envd_url}/files",
            params=self._file_params(file),
            content=data,
            headers=self._headers(None) | {"Content-Type": "application/octet-stream"},
        )
        _check_file(response, file)

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
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        data = bytearray()
        async with self._api._client.stream(
            "GET",
            f"{self._envd_url}/files",
            params=self._file_params(file),
            headers=self._headers(None),
        ) as response:
            if response.status_code != 200:
                await response.aread()
                _check_file(response, file)
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise OutputLimitExceededError(
                        SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None
                    )
        return data.decode() if text else bytes(data)

    # helpers

    def _headers(self, user: str | None) -> dict[str, str]:
        who = base64.b64encode(f"{user or self._default_user}:".encode()).decode()
        headers = {
            "E2b-Sandbox-Id": self.sandbox_id,
            "E2b-Sandbox-Port": str(ENVD_PORT),
            "Authorization": f"Basic {who}",
            "Connect-Protocol-Version": "1",
        }
        if self._token:
            headers["X-Access-Token"] = self._token
        return headers

    def _path(self, path: str) -> str:
        """Relative paths are under the working directory (else the user's home)."""
        if self._working_dir is None or path.startswith("/"):
            return path
        return os.path.normpath(f"{self._working_dir}/{path}")

    def _file_params(self, file: str) -> dict[str, str]:
        return {"path": self._path(file), "username": self._default_user}

    async def _make_working_dir(self, directory: str) -> None:
        owner = f"{self._default_user}:{self._default_user}"
        result = await self.exec(
            ["sh", "-c", f'mkdir -p "$1" && chown {owner} "$1"', "sh", directory],
            cwd="/",
            user="root",
        )
        if not result.success:
            raise RuntimeError(f"cannot make working_dir {directory!r}: {result.stderr}")


def _returncode(end: Mapping[str, Any]) -> int:
    code = int(end.get("exitCode", 0))
    status = str(end.get("status", ""))
    if code < 0 and status.startswith("signal: "):
        # an E2B daemon that reports a death by signal as -1
        names = {(signal.strsignal(s) or "").lower(): s for s in signal.Signals}
        return 128 + int(names.get(status.removeprefix("signal: "), 0))
    return code


def _raise_end_of_stream(message: Mapping[str, Any]) -> None:
    error = message.get("error")
    if not error:
        return
    code, text = error.get("code"), error.get("message", "")
    if code == "deadline_exceeded":
        raise TimeoutError(f"command timed out: {text}")
    raise _ExecFailed(text or str(code))


def _check_file(response: httpx.Response, file: str) -> None:
    if response.status_code < 300:
        return
    message = f"{_message(response)} (file {file!r})"
    match response.status_code:
        case 404:
            raise FileNotFoundError(message)
        case 403 | 401:
            raise PermissionError(message)
        case 400 if "directory" in message:
            raise IsADirectoryError(message)
    raise RuntimeError(f"file operation on {file!r} failed: {message}")


async def _kill_all(
    config: SwarmServerConfig, metadata: Mapping[str, str], ids: list[str] | None = None
) -> None:
    """Kill the given sandboxes, or every sandbox with `metadata`, on the configured server."""
    connection = await _connection(config)
    async with httpx.AsyncClient(timeout=60) as client:
        api = _Api(connection, client)
        targets = ids if ids is not None else await api.list(metadata)
        async with anyio.create_task_group() as tg:
            for sandbox_id in targets:
                tg.start_soon(api.kill, sandbox_id)
