from __future__ import annotations

import dataclasses
import os
import posixpath
import shutil
import tempfile
from pathlib import Path

from inspect_ai.util import (
    ComposeConfig,
    ExecResult,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentSpec,
    sandboxenv,
)
from inspect_ai.util._sandbox._cli import SANDBOX_CLI
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment
from pydantic import BaseModel, ConfigDict
from typing_extensions import override

from ._compose import (
    DEFAULT,
    ComposeSandboxEnvironment,
    Names,
    VolumeMount,
    compose_services,
    default_first,
    refusal,
    volume_mounts,
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

    Returns:
        The sandbox spec.

    Raises:
        ValueError: A name is empty, contains `:` or is given twice.
    """
    config = MultidirConfig(environments=environments or (DEFAULT,))
    return SandboxEnvironmentSpec(SANDBOX_TYPE, config)


@dataclasses.dataclass(frozen=True)
class Mount:
    """A named volume in an environment, at `path` relative to its working directory."""

    volume: str
    path: str
    """`.` when the volume is the working directory itself."""


def environment_mounts(config: SandboxEnvironmentConfigType | None) -> dict[str, list[Mount]]:
    """The named volumes of each environment of a compose config (none for other configs).

    An environment's directory stands for its service's `working_dir` (`/` without one), so a
    volume mounted there, or below it, appears at the same path relative to the directory.
    Access modes are ignored: a volume mounted read-only is shared as it is (the provider
    isolates nothing).
    """
    if not isinstance(config, str | ComposeConfig):
        return {}
    services = compose_services(config, "environment")
    mounts = {
        name: [_placed(name, services[name].working_dir, m) for m in found]
        for name, found in volume_mounts(config, "environment").items()
    }
    homes: dict[str, list[str]] = {}
    for name, placed in mounts.items():
        for mount in placed:
            if mount.path == ".":
                homes.setdefault(mount.volume, []).append(name)
    for volume, names in homes.items():
        if len(names) > 1:
            raise ValueError(
                f"multidir: volume {volume!r} is the working_dir of environments {names}, and "
                "each environment has a directory of its own. Mount it below their working_dir "
                "instead, or use the docker sandbox."
            )
    return mounts


def _placed(name: str, working_dir: str | None, mount: VolumeMount) -> Mount:
    home = posixpath.normpath(working_dir or "/")
    path = posixpath.relpath(posixpath.normpath(mount.target), home)
    if not posixpath.isabs(mount.target) or path == ".." or path.startswith("../"):
        raise ValueError(
            f"multidir: environment {name!r} mounts volume {mount.volume!r} at "
            f"{mount.target!r}, which is not at or below its working_dir {home!r}. multidir "
            "shows a volume at its path relative to the environment's directory, which stands "
            "for the working_dir: mount it there, or use the docker sandbox."
        )
    return Mount(mount.volume, path)


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
    """The provider's own config model, `MultidirConfig`."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        """The environment's name."""
        self._volumes: list[tempfile.TemporaryDirectory[str]] = []

    @property
    def working_dir(self) -> Path:
        """The environment's private working directory."""
        return Path(self.directory.name)

    @override
    @classmethod
    def _service_names(cls, config: SandboxEnvironmentConfigType | None) -> list[str]:
        environment_mounts(config)  # a layout multidir cannot give is refused at task start
        return environment_names(config)

    @override
    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        """Make a sample's environments, each with a new private working directory.

        The named volumes of a compose config are shared as directories: a volume mounted at an
        environment's `working_dir` is that environment's directory, and elsewhere it is a
        symbolic link, at the same path relative to the directory, to one directory per volume.

        Args:
            task_name: The task's name.
            config: A compose file or config, a `MultidirConfig`, or `None` for one `default`
                environment.
            metadata: The sample's metadata (unused).

        Returns:
            The environments by name, the default first.

        Raises:
            ValueError: A config the provider cannot use, or volumes it cannot lay out.
        """
        environments: dict[str, SandboxEnvironment] = {}
        try:
            for name in environment_names(config):
                environments[name] = cls(name)
            _mount_volumes(environments, environment_mounts(config))
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
        """Stop the sandbox tools the sample's environments started, and remove every
        environment's directory and volumes, even when an error or a cancellation cuts the
        cleanup short.

        Args:
            task_name: The task's name.
            config: The sample's config.
            environments: The environments `sample_init()` made.
            interrupted: Whether the sample was interrupted.
        """
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
        """Run a command as a host process in the environment's working directory.

        The command runs in a session of its own, so a timeout or a cancellation ends what it
        started as well. A command killed by signal N returns exit status 128+N, as in a shell.

        Args:
            cmd: The program and its arguments.
            input: What the command reads on its standard input.
            cwd: The directory to run in: absolute, or relative to the working directory.
            env: Environment variables for the command.
            user: The user to run as; only the current user can be given.
            timeout: Seconds after which the command is stopped.
            timeout_retry: Part of the sandbox interface; a local command is not retried.
            concurrency: Whether inspect_ai's `concurrency()` limit on local subprocesses
                throttles the command.

        Returns:
            The command's exit status and output.

        Raises:
            SandboxUserUnsupportedError: `user` is not the current user.
            TimeoutError: The command ran past `timeout`.
            PermissionError: The program is not executable.
        """
        command = cmd
        if cmd[:1] != [SANDBOX_CLI] and self._runnable(cmd[0], cwd, env):
            command = _in_own_session(cmd)
        result = await super().exec(
            command, input, cwd, env, user, timeout, timeout_retry, concurrency
        )
        if result.returncode < 0:
            # a process killed by signal N exits 128+N, as in a shell or a container
            return dataclasses.replace(result, returncode=128 - result.returncode)
        return result

    def _runnable(self, program: str, cwd: str | None, env: dict[str, str] | None) -> bool:
        """Whether `program` will start; one that will not is left to fail as it does
        unwrapped (`PermissionError`, `FileNotFoundError`)."""
        if "/" not in program:
            path = (env or {}).get("PATH", os.environ.get("PATH"))
            return shutil.which(program, path=path) is not None
        where = self.working_dir / (cwd or ".") / program
        return where.is_file() and os.access(where, os.X_OK)


# Stopping a command (a timeout, a cancellation) signals the process exec started, and then
# waits, shielded and without end, until its output closes. A process it started (`tar`
# under `sh -c "tar ... || ..."`) keeps the output open, and if it waits for input that exec
# holds until then, nothing ends. So the command runs in a session of its own, under a shell
# that kills the whole session when signalled; a command that ends by itself leaves what it
# started running, as before.
_SESSION = 'trap "kill -s KILL 0" TERM; exec 3<&0; "$@" <&3 3<&- & wait $!'


def _in_own_session(cmd: list[str]) -> list[str]:
    """`cmd` in a session of its own, which a TERM ends whole (where `setsid` exists)."""
    setsid = shutil.which("setsid")
    return [setsid, "sh", "-c", _SESSION, "sh", *cmd] if setsid else cmd


def _mount_volumes(
    environments: dict[str, SandboxEnvironment], mounts: dict[str, list[Mount]]
) -> None:
    """Give each named volume a directory, and show it in each environment that mounts it.

    A volume that is an environment's working directory is that environment's directory;
    another gets a directory of its own, which the first environment removes with its own.
    Elsewhere a volume is a symbolic link to its directory.
    """
    envs = {name: env.as_type(MultidirSandboxEnvironment) for name, env in environments.items()}
    directories = {
        mount.volume: envs[name].working_dir
        for name, found in mounts.items()
        for mount in found
        if mount.path == "."
    }
    for found in mounts.values():
        for mount in found:
            if mount.volume not in directories:
                volume = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
                next(iter(envs.values()))._volumes.append(volume)
                directories[mount.volume] = Path(volume.name)
    for name, found in mounts.items():
        for mount in found:
            if mount.path != ".":
                link = envs[name].working_dir / mount.path
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(directories[mount.volume], target_is_directory=True)


def _remove_directories(environments: dict[str, SandboxEnvironment]) -> None:
    for environment in environments.values():
        env = environment.as_type(MultidirSandboxEnvironment)
        for directory in [env.directory, *env._volumes]:
            directory.cleanup()
