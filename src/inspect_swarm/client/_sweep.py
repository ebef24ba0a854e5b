"""Run many `inspect eval` invocations as one swarm run and gather their logs in one place.

Each sandbox runs one invocation (one arm, or one sample) with `--log-dir <log_dir>/<arm>`.
On this package's server started with `--share <log_dir>` (or a parent of it), the logs land
on the host directly; the result file of each sandbox carries a compact summary (its arm, log
directory and log file names, kept under the 64 KB result limit). `log_dir/sweep.json` then
records the run and every arm, so the analysis reads the directory as one sweep.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._client import SwarmsClient

RESULT_PATH = "/tmp/inspect-swarm-sweep.json"
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

# The sandbox's summary: the arm, its log directory and its log files (as JSON).
_SUMMARY = (
    "import json, os, sys; d = sys.argv[1]; "
    "logs = sorted(f for f in os.listdir(d) if f.endswith(('.eval', '.json'))) "
    "if os.path.isdir(d) else []; "
    "print(json.dumps({'arm': sys.argv[2], 'logDir': d, 'logs': logs[:200], "
    "'exitCode': int(sys.argv[3])}))"
)


def default_inspect_command() -> str:
    """The `inspect` next to this interpreter (sandboxes see it when the server shares or
    exposes its environment)."""
    return str(Path(sys.executable).with_name("inspect"))


def sample_arms(
    task: str, sample_ids: Sequence[str | int], args: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Arms for `sweep()` that each evaluate one sample of a task, in a sandbox of its own.

    Args:
        task: The task, as `inspect eval` takes it (a file, `file@task` or a registry name).
        sample_ids: The samples, one arm each.
        args: Further `inspect eval` arguments for every arm (a model, `-T` options...).

    Returns:
        `{"sample-<id>": [task, "--sample-id", "<id>", *args]}` for each sample.
    """
    return {f"sample-{i}": [task, "--sample-id", str(i), *args] for i in sample_ids}


def _arm_command(
    inspect: str, log_dir: Path, arm: str, args: Sequence[str], cwd: str | None
) -> str:
    arm_dir = str(log_dir / arm)
    eval_cmd = shlex.join([inspect, "eval", *args, "--log-dir", arm_dir])
    if cwd is not None:
        eval_cmd = f"cd {shlex.quote(cwd)} && {eval_cmd}"
    summary = shlex.join([sys.executable, "-c", _SUMMARY, arm_dir, arm])
    return f'{eval_cmd}; code=$?; {summary} "$code" > {RESULT_PATH}; exit $code'


def sweep(
    arms: Mapping[str, Sequence[str]],
    log_dir: str | Path,
    *,
    client: SwarmsClient | None = None,
    size: str | Mapping[str, int] = "2x4",
    timeout_seconds: int = 3600,
    concurrency: int | None = None,
    env: Mapping[str, str] | None = None,
    name: str = "sweep",
    inspect_command: str | None = None,
    cwd: str | Path | None = None,
    poll_interval: float | None = None,
) -> dict[str, Any]:
    """Run each arm's `inspect eval` arguments in its own sandbox, as one swarm run.

    Args:
        arms: Arm name to the arguments after `inspect eval` (task, `-T`, `--model`, ...).
            See `sample_arms` for one sandbox per sample.
        log_dir: The sweep's log directory (absolute); arm logs go to `<log_dir>/<arm>`.
            On this package's server, start it with `--share` on this directory.
        client: The Swarms client (default: `SwarmsClient()`, which finds its server as the
            CLI does: MARITIME_API_URL and MARITIME_API_KEY, else the current context).
        size: The size of each sandbox.
        timeout_seconds: How long each arm may run.
        concurrency: The most arms at once (default: as many as fit).
        env: Variables for every arm (for example model API keys).
        name: The run's name.
        inspect_command: The `inspect` executable inside the sandboxes.
        cwd: The directory each arm runs `inspect eval` in (inspect_ai resolves task files
            relative to it; it does not take absolute task file paths).
        poll_interval: Seconds between polls while waiting.

    Returns:
        The sweep manifest also written to `<log_dir>/sweep.json`: the run's id and counts,
        and per arm its status, exit code, log directory and log files.
    """
    log_dir = Path(log_dir)
    if not log_dir.is_absolute():
        raise ValueError(f"log_dir: must be an absolute path, got {str(log_dir)!r}")
    for arm in arms:
        if not _ARM_NAME.match(arm):
            raise ValueError(
                f"arms: {arm!r} is not a usable directory name (letters, digits, '_', '.', '-')"
            )
    if not arms:
        raise ValueError("arms: give at least one arm")
    names = list(arms)
    inspect = inspect_command or default_inspect_command()
    owned = client is None
    client = client or SwarmsClient()
    try:
        run = client.swarms.start(
            'sh -c "$SWEEP_COMMAND"',
            inputs=[
                {
                    "env": {
                        "SWEEP_COMMAND": _arm_command(
                            inspect, log_dir, arm, arms[arm], None if cwd is None else str(cwd)
                        )
                    }
                }
                for arm in names
            ],
            size=size,
            timeout_seconds=timeout_seconds,
            concurrency=concurrency,
            env=env,
            result_path=RESULT_PATH,
            name=name,
        )
        done = client.swarms.wait(run["id"], poll_interval=poll_interval)
    finally:
        if owned:
            client.close()
    manifest = {
        "swarmId": done["id"],
        "name": name,
        "counts": done.get("counts"),
        "arms": [
            _arm_entry(arm, sandbox, log_dir)
            for arm, sandbox in zip(names, done["sandboxes"], strict=True)
        ],
    }
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "sweep.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def _arm_entry(arm: str, sandbox: Mapping[str, Any], log_dir: Path) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    if sandbox.get("result"):
        try:
            summary = json.loads(sandbox["result"])
        except json.JSONDecodeError:
            summary = {}
    return {
        "arm": arm,
        "status": sandbox.get("status"),
        "exitCode": sandbox.get("exitCode"),
        "error": sandbox.get("error"),
        "sandboxId": sandbox.get("sandboxId"),
        "logDir": summary.get("logDir", str(log_dir / arm)),
        "logs": summary.get("logs", []),
        "stderrTail": (sandbox.get("stderrTail") or "")[-2000:],
    }
