"""Run every code block of a documentation page, in order, as the page's test (with Sybil).

A page's blocks share one namespace and one working directory, as a reader who follows the
page does:

- `python` blocks run in the page's namespace.
- `bash` blocks run with bash in the page's working directory, with the project's `.venv/bin`
  first on `PATH`; variables a block exports reach the page's later blocks (bash and python
  alike), and processes a block leaves running in the background are ended when the page is done. A block fails if
  its command does.
- A `yaml` block whose first line is `# file: NAME` is written to `NAME` in the working
  directory, so later blocks can use it; every `yaml` block must parse.
- A `json` block must parse, and is kept as `shown[-1]` for a hidden check that compares it
  with what a run produced.
- Other languages (`text`, `console`) are shown, not run.

Markers, as Sybil's skip directive in an HTML comment (invisible on the site):

- `<!-- skip: next "needs a real model" -->` (or `"needs Docker"`, `"installs packages"`,
  ...): the next block cannot run offline here.
- `<!-- skip: next if(later("issue 13"), reason="needs issue 13") -->`: the next block
  describes a feature a later change adds; it is skipped while `later()` says the feature is
  missing, and runs, and must pass, once it is there. `skip: start` ... `skip: end` covers
  several blocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import SkipTest

import yaml
from sybil import Document, Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
VENV_BIN = Path(sys.executable).parent

SKIP_REASONS = (
    "needs a real model",
    "needs Docker",
    "needs Kubernetes",
    "installs packages",
    "runs the whole test suite",
    "serves until stopped",
    "runs the benchmarks",
    "needs the hosted service",
)
"""The reasons a block may give for never running here."""


def _has_swarm_react() -> bool:
    from inspect_ai._util.registry import registry_lookup

    import inspect_swarm

    return hasattr(inspect_swarm, "swarm_react") or (
        registry_lookup("agent", "inspect_swarm/swarm_react") is not None
    )


LATER: dict[str, Callable[[], bool]] = {
    # issue 13 lands as one change: swarm_react, the final/member_result/wiring events, the
    # answer message's metadata under "final", and what is left in swarm_resources()
    "issue 13": _has_swarm_react,
}
"""Features the guide describes before they land, and how to tell that one has landed."""


def later(feature: str) -> bool:
    """Whether `feature` is still to come (so a block marked with it is skipped)."""
    return not LATER[feature]()


@dataclass
class Shell:
    """The page's shell: its working directory, exported variables and background processes."""

    cwd: Path
    env: dict[str, str]
    groups: list[int] = field(default_factory=list)

    def run(self, source: str, line: int) -> subprocess.CompletedProcess[str]:
        exported = self.cwd / ".page-env"
        script = f"set -eo pipefail\n{source}\nexport -p > {shlex.quote(str(exported))}\n"
        # a file, not a pipe: a process the block leaves in the background keeps its output open
        log = self.cwd / f".block-{line}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                ["bash", "-c", script],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.groups.append(process.pid)
            process.wait(timeout=300)
        output = log.read_text()
        if process.returncode != 0:
            raise AssertionError(f"the bash block at line {line} failed:\n{source}\n{output}")
        self.env = _exported(exported, self.env)
        os.environ.update(self.env)  # python blocks see what a reader's shell exported
        return subprocess.CompletedProcess(process.args, 0, output, None)

    def close(self) -> None:
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)


def _exported(path: Path, env: dict[str, str]) -> dict[str, str]:
    # `export -p` prints `declare -x NAME="VALUE"`; bash itself reads them back
    dump = subprocess.run(
        ["bash", "-c", f"source {shlex.quote(str(path))}; env -0"],
        env={},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    values = dict(item.split("=", 1) for item in dump.split("\0") if "=" in item)
    for name in ("PWD", "OLDPWD", "SHLVL", "_"):
        values.pop(name, None)
    return {**env, **values}


def _bash(example: Example) -> None:
    shell: Shell = example.namespace["shell"]
    shell.run(str(example.parsed), example.line)


def _yaml(example: Example) -> None:
    source = str(example.parsed)
    data = yaml.safe_load(source)
    first = source.splitlines()[0] if source.strip() else ""
    if first.startswith("# file:"):
        shell: Shell = example.namespace["shell"]
        (shell.cwd / first.removeprefix("# file:").strip()).write_text(source)
    example.namespace.setdefault("shown_yaml", []).append(data)


def _json(example: Example) -> None:
    example.namespace["shown"].append(json.loads(str(example.parsed)))


def _not_run(example: Example) -> None:
    return None


SYBIL = Sybil(
    parsers=[
        PythonCodeBlockParser(),
        CodeBlockParser(language="bash", evaluator=_bash),
        CodeBlockParser(language="yaml", evaluator=_yaml),
        CodeBlockParser(language="json", evaluator=_json),
        CodeBlockParser(language="text", evaluator=_not_run),
        CodeBlockParser(language="console", evaluator=_not_run),
        SkipParser(),
    ],
    path=str(ROOT),
)


@dataclass(frozen=True)
class Skipped:
    line: int
    reason: str


def blocks(path: Path) -> Document:
    return SYBIL.parse(path)


def run_page(path: Path, workdir: Path) -> list[Skipped]:
    """Run the page's blocks in order in `workdir`; return the blocks it skipped, and why."""
    (workdir / "examples").symlink_to(ROOT / "examples")
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "INSPECT_LOG_DIR": str(workdir / "logs"),
        "INSPECT_DISPLAY": "none",
        "INSPECT_LOG_LEVEL": "warning",
        # a reader of the page is a user of their own: the contexts a server records go here
        "XDG_CONFIG_HOME": str(workdir / "config"),
    }
    shell = Shell(workdir, env)
    document = blocks(path)
    document.namespace.update(shell=shell, later=later, shown=[], workdir=workdir)
    skipped: list[Skipped] = []
    old_cwd, old_environ = Path.cwd(), dict(os.environ)
    os.chdir(workdir)
    os.environ["INSPECT_LOG_DIR"] = env["INSPECT_LOG_DIR"]
    try:
        for example in document:
            try:
                example.evaluate()
            except SkipTest as skip:
                skipped.append(Skipped(example.line, str(skip)))
    finally:
        shell.close()
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_environ)
    return skipped


def markers(path: Path) -> Iterator[tuple[int, str]]:
    """Every skip marker of a page, with its line."""
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if "<!--" in text and "skip:" in text:
            yield number, text.strip()


def reason_ok(marker: str) -> bool:
    """A marker skips for a known reason: one of SKIP_REASONS, or a later feature."""
    if any(f'"{reason}"' in marker for reason in SKIP_REASONS):
        return True
    if "skip: end" in marker:
        return True
    return any(f'later("{feature}")' in marker for feature in LATER)


__all__: list[Any] = ["DOCS", "ROOT", "Skipped", "markers", "reason_ok", "run_page"]
