import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog
from inspect_ai.log._samples import sample_active
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import ComposeConfig, SandboxEnvironment, sandbox, store
from inspect_ai.util._concurrency import init_concurrency
from inspect_ai.util._sandbox.context import sandbox_environments_context_var
from inspect_ai.util._sandbox.local import LocalSandboxEnvironment
from inspect_ai.util._sandbox.self_check import *  # noqa: F403  (inspect's conformance suite)

from inspect_swarm.sandbox import MultidirConfig, MultidirSandboxEnvironment, multidir
from inspect_swarm.sandbox._multidir import environment_names

pytestmark = pytest.mark.anyio

# --- inspect's sandbox conformance suite, run on one multidir environment -----------------


@pytest.fixture
def anyio_backend() -> str:
    # outside an eval, inspect's subprocess semaphore belongs to one event loop; the evals
    # below run on both backends
    return "asyncio"


@pytest.fixture(autouse=True)
def fresh_semaphores() -> None:
    # outside an eval, commands take inspect's subprocess semaphore from the registry of the
    # last eval this process ran, which may belong to the other backend: start from none
    init_concurrency()


# root ignores permission bits, so checks that expect a refusal cannot pass as root
ROOT_FAILURES = {
    "test_read_file_not_allowed": "root reads files whatever their mode",
    "test_write_text_file_without_permissions": "root writes files whatever their mode",
    "test_write_binary_file_without_permissions": "root writes files whatever their mode",
}


# commands run as the current user only (as with inspect's local provider); run as root, the
# check would add a user to this machine before failing
NOT_RUN = {"test_exec_as_user": "multidir runs commands as the current user only"}


@pytest.fixture
async def sandbox_env(request: pytest.FixtureRequest) -> AsyncIterator[SandboxEnvironment]:
    check = request.node.originalname
    if os.geteuid() == 0 and (why := ROOT_FAILURES.get(check)):
        request.applymarker(pytest.mark.xfail(reason=why, strict=True))
    if why := NOT_RUN.get(check):
        request.applymarker(pytest.mark.xfail(reason=why, run=False))
    envs = await MultidirSandboxEnvironment.sample_init(
        "self_check", multidir("default", "other").config, {}
    )
    yield envs["default"]
    await MultidirSandboxEnvironment.sample_cleanup("self_check", None, envs, False)


# --- the provider in real evals -------------------------------------------------------------


@solver
def survey(write_to: str = "alice") -> Solver:
    """Record, in the store, what each environment of the sample holds and where it runs."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        envs = sandbox_environments_context_var.get()
        await sandbox(write_to).write_file("mine.txt", write_to)
        report: dict[str, Any] = {
            "names": list(envs),
            "default": sandbox().as_type(MultidirSandboxEnvironment).name,
            "envs": {},
        }
        for name in envs:
            env = sandbox(name)
            listing = await env.exec(["sh", "-c", "pwd; ls"])
            cwd, *files = listing.stdout.split()
            report["envs"][name] = {
                "cwd": cwd,
                "dir": str(env.as_type(MultidirSandboxEnvironment).working_dir),
                "files": sorted(files),
            }
        store().set("survey", report)
        return state

    return solve


def run(
    sandbox_spec: Any,
    log_dir: Path,
    *,
    solver: Solver | None = None,
    files: dict[str, str] | None = None,
    **kwargs: Any,
) -> EvalLog:
    task = Task(
        dataset=[Sample(id="s", input="x", files=files)],
        solver=solver or survey(),
        sandbox=sandbox_spec,
    )
    [log] = eval(task, model="none", display="none", log_dir=str(log_dir), **kwargs)
    return log


def survey_of(log: EvalLog) -> dict[str, Any]:
    assert log.status == "success", log.error
    assert log.samples is not None
    return dict(log.samples[0].store["survey"])


def test_each_environment_is_a_private_directory(tmp_path: Path, backend: str) -> None:
    files = {"readme.txt": "for default", "alice:task.txt": "for alice", "bob:notes/b.txt": "b"}
    report = survey_of(run(multidir("default", "alice", "bob"), tmp_path, files=files))
    envs = report["envs"]
    assert report["names"] == ["default", "alice", "bob"]
    assert report["default"] == "default"
    # commands run in the environment's own directory
    assert all(envs[n]["cwd"] == envs[n]["dir"] for n in ("default", "alice", "bob"))
    assert len({envs[n]["dir"] for n in ("default", "alice", "bob")}) == 3
    # sample files land in the environment their key names, a write only in its own
    assert envs["default"]["files"] == ["readme.txt"]
    assert envs["alice"]["files"] == ["mine.txt", "task.txt"]
    assert envs["bob"]["files"] == ["notes"]
    # every directory is gone once the sample ends
    assert not any(Path(envs[n]["dir"]).exists() for n in ("default", "alice", "bob"))


def test_without_config_there_is_one_default(tmp_path: Path) -> None:
    report = survey_of(run("multidir", tmp_path, solver=survey(write_to="default")))
    envs = report["envs"]
    assert report["names"] == ["default"]
    assert envs["default"]["files"] == ["mine.txt"]


def test_compose_file_gives_its_services_default_first(tmp_path: Path, backend: str) -> None:
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        "services:\n"
        "  alice: {image: python:3.12}\n"
        "  checker: {image: python:3.12, x-default: true}\n"
        "  bob: {image: python:3.12}\n"
    )
    files = {"checker:answer.txt": "42"}
    report = survey_of(run(("multidir", str(compose)), tmp_path / "logs", files=files))
    envs = report["envs"]
    assert report["names"] == ["checker", "alice", "bob"]
    assert report["default"] == "checker"
    assert envs["checker"]["files"] == ["answer.txt"]


VOLUMES = """
services:
  agent-1:
    image: python:3.12-slim
    working_dir: /workspace
    volumes: [agent-1:/workspace, notes:/workspace/notes]
    x-default: true
  agent-2:
    image: python:3.12-slim
    working_dir: /workspace
    volumes: [agent-2:/workspace, notes:/workspace/notes, ./ignored:/workspace/host]
  comparator:
    image: python:3.12-slim
    working_dir: /answers
    volumes:
      - agent-1:/answers/agent-1:ro
      - {type: volume, source: agent-2, target: /answers/agent-2, read_only: true}
volumes:
  agent-1:
  agent-2:
  notes:
"""


@solver
def share_through_volumes() -> Solver:
    """Write in each agent's working directory, and read it all from the comparator."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        for name in ("agent-1", "agent-2"):
            await sandbox(name).exec(["sh", "-c", f"echo {name} > answer.txt"])
            await sandbox(name).exec(["sh", "-c", f"echo {name} >> notes/log"])
        seen = await sandbox("comparator").exec(
            ["sh", "-c", "cat agent-1/answer.txt agent-2/answer.txt agent-1/notes/log"]
        )
        envs = sandbox_environments_context_var.get()
        dirs = [str(e.as_type(MultidirSandboxEnvironment).working_dir) for e in envs.values()]
        store().set("volumes", {"seen": seen.stdout, "dirs": dirs})
        return state

    return solve


def test_named_volumes_are_shared_at_their_paths_below_the_working_dir(
    tmp_path: Path, backend: str
) -> None:
    compose = tmp_path / "compose.yaml"
    compose.write_text(VOLUMES)
    log = run(("multidir", str(compose)), tmp_path / "logs", solver=share_through_volumes())
    assert log.status == "success" and log.samples
    report = log.samples[0].store["volumes"]
    # each agent's working directory is its volume, which the comparator sees by name; the
    # notes volume is one directory that both agents see
    assert report["seen"] == "agent-1\nagent-2\nagent-1\nagent-2\n"
    assert not any(Path(d).exists() for d in report["dirs"])


@pytest.mark.parametrize(
    ("service", "message"),
    [
        (
            "{working_dir: /w, volumes: [v:/data]}",
            r"mounts volume 'v' at '/data', which is not at or below its working_dir '/w'",
        ),
        ("{volumes: [other:/data]}", "mounts volume 'other', which is not declared"),
    ],
)
def test_volumes_multidir_cannot_show_are_refused(service: str, message: str) -> None:
    compose = ComposeConfig.model_validate(
        {"services": {"a": yaml.safe_load(service)}, "volumes": {"v": None}}
    )
    with pytest.raises(ValueError, match=message):
        MultidirSandboxEnvironment._service_names(compose)


def test_a_volume_that_is_two_working_dirs_is_refused(tmp_path: Path) -> None:
    compose = tmp_path / "compose.yaml"
    compose.write_text(
        "services:\n  a: {working_dir: /w, volumes: [v:/w]}\n  b: {working_dir: /w, volumes: [v:/w]}\n"
        "volumes: {v: {}}\n"
    )
    with pytest.raises(
        ValueError, match=r"volume 'v' is the working_dir of environments \['a', 'b'\]"
    ):
        run(("multidir", str(compose)), tmp_path / "logs")


def test_config_in_the_log_rebuilds_the_spec(tmp_path: Path) -> None:
    log = run(multidir("default", "w-1"), tmp_path, solver=survey(write_to="w-1"))
    assert log.eval.sandbox is not None
    assert log.eval.sandbox.type == "multidir"
    assert log.eval.sandbox.config == MultidirConfig(environments=["default", "w-1"])


def test_named_default_comes_first() -> None:
    assert environment_names(MultidirConfig(environments=["w-1", "default"])) == ["default", "w-1"]
    assert environment_names(MultidirConfig(environments=["w-1", "w-2"])) == ["w-1", "w-2"]
    assert environment_names(None) == ["default"]


def test_dockerfile_config_gives_one_default(tmp_path: Path) -> None:
    assert environment_names(str(tmp_path / "Dockerfile")) == ["default"]


@pytest.mark.parametrize(
    ("environments", "message"),
    [
        (["a", "a"], r"lists \['a'\] more than once"),
        (["default", "x:y"], "environment name 'x:y' is not valid"),
        ([""], "environment name '' is not valid"),
        ([], "at least 1 item"),
    ],
)
def test_bad_environment_names_are_refused(environments: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        multidir(*environments) if environments else MultidirConfig(environments=environments)


def test_two_x_default_services_are_refused(tmp_path: Path) -> None:
    compose = tmp_path / "compose.yaml"
    compose.write_text("services:\n  a: {x-default: true}\n  b: {x-default: true}\n")
    with pytest.raises(ValueError, match=r"Services \['a', 'b'\] .* mark one service only"):
        environment_names(str(compose))


def test_bad_compose_file_fails_the_eval_at_start(tmp_path: Path) -> None:
    compose = tmp_path / "compose.yaml"
    compose.write_text("services:\n  a: {x-default: true}\n  b: {x-default: true}\n")
    with pytest.raises(ValueError, match="mark one service only"):
        run(("multidir", str(compose)), tmp_path / "logs")
    assert not list((tmp_path / "logs").glob("*.eval"))


@solver
def record_dirs_then(fail: str) -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        envs = sandbox_environments_context_var.get()
        dirs = [str(e.as_type(MultidirSandboxEnvironment).working_dir) for e in envs.values()]
        store().set("dirs", dirs)
        if fail == "error":
            raise RuntimeError("the solver failed")
        active = sample_active()
        assert active is not None
        active.interrupt("error")
        await anyio.sleep_forever()
        return state

    return solve


@pytest.mark.parametrize("fail", ["error", "interrupt"])
def test_directories_are_removed_when_the_sample_fails(tmp_path: Path, fail: str) -> None:
    log = run(
        multidir("default", "a", "b"), tmp_path, solver=record_dirs_then(fail), fail_on_error=False
    )
    assert log.samples is not None
    [sample] = log.samples
    assert sample.error is not None
    dirs = sample.store["dirs"]
    assert len(dirs) == 3
    assert not any(Path(d).exists() for d in dirs)


@pytest.mark.anyio
async def test_cleanup_removes_every_directory_when_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the inherited cleanup stops at the first environment a cancellation interrupts
    async def stop_slowly(self: LocalSandboxEnvironment, *, timeout: int) -> None:  # noqa: ASYNC109
        await anyio.sleep_forever()

    monkeypatch.setattr(LocalSandboxEnvironment, "_stop_sandbox_tools", stop_slowly)
    envs = await MultidirSandboxEnvironment.sample_init(
        "t", multidir("default", "a", "b").config, {}
    )
    dirs = [env.as_type(MultidirSandboxEnvironment).working_dir for env in envs.values()]
    assert all(d.is_dir() for d in dirs)
    with anyio.move_on_after(0):
        await MultidirSandboxEnvironment.sample_cleanup("t", None, envs, True)
    assert not any(d.exists() for d in dirs)


@solver
def stop_a_command_whose_child_holds_its_output() -> Solver:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        start = time.monotonic()
        with anyio.move_on_after(1):
            # `sleep` outlives its shell, with the command's output open and its input unread
            await sandbox().exec(["sh", "-c", "sleep 20 || true"], input="x" * 1_000_000)
        store().set("seconds", time.monotonic() - start)
        return state

    return solve


def test_a_stopped_command_ends_with_what_it_started(tmp_path: Path, backend: str) -> None:
    # inspect waits, shielded, for a stopped command's output to close: were the command's
    # child left running, exec would wait for it (forever, for a child that waits for input)
    log = run("multidir", tmp_path, solver=stop_a_command_whose_child_holds_its_output())
    assert log.status == "success" and log.samples
    assert log.samples[0].store["seconds"] < 10


@pytest.mark.anyio
async def test_signal_death_exits_128_plus_the_signal() -> None:
    envs = await MultidirSandboxEnvironment.sample_init("t", None, {})
    try:
        result = await envs["default"].exec(["sh", "-c", "kill -KILL $$"])
        assert (result.success, result.returncode) == (False, 137)
    finally:
        await MultidirSandboxEnvironment.sample_cleanup("t", None, envs, False)
