"""The README and the guide name only things the project has.

The project's files (`examples/...`, `scripts/...`), its modules and names
(`inspect_swarm.x.y`) and the `inspect-swarm` commands and their flags, wherever a page names
them, in prose or in a code block (run or skipped alike).
"""

from __future__ import annotations

import functools
import importlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from .pages import DOCS, ROOT, VENV_BIN

PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

_PATH = re.compile(r"(?<![\w/.$~-])((?:examples|scripts|benchmarks|tests|src|docs)/[\w./-]*\w)")
_DOTTED = re.compile(r"\binspect_swarm(?:\.[A-Za-z_]\w*)+")
_COMMAND = re.compile(r"^ {4}([a-z][\w-]*) {2,}")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _text(page: Path) -> str:
    # a shell command continued on the next line is one command
    return re.sub(r"\\\n\s*", " ", page.read_text())


def _source() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))


@functools.cache
def _help(*command: str) -> str | None:
    """The help of an `inspect-swarm` command, or None when there is no such command."""
    done = subprocess.run(
        [str(VENV_BIN / "inspect-swarm"), *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout if done.returncode == 0 else None


def _subcommands(help_text: str) -> set[str]:
    after = help_text.split("\ncommands:", 1)[1] if "\ncommands:" in help_text else ""
    return {m.group(1) for line in after.splitlines() if (m := _COMMAND.match(line))}


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_named_files_exist(page: Path) -> None:
    missing = sorted(
        {p for p in _PATH.findall(page.read_text()) if not (ROOT / p.rstrip(".")).exists()}
    )
    assert not missing, f"{page.name} names files the project does not have: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_named_modules_and_names_exist(page: Path) -> None:
    source = _source()
    # a logger's name is a dotted name too
    missing = sorted(
        {
            n
            for n in _DOTTED.findall(page.read_text())
            if not n.endswith((".md", ".py")) and not _resolves(n) and f'"{n}"' not in source
        }
    )
    assert not missing, f"{page.name} names what inspect_swarm does not have: {missing}"


def _invocations(page: Path) -> list[list[str]]:
    """The words of each `inspect-swarm` command a page shows, up to a pipe or the like."""
    found = []
    for line in _text(page).splitlines():
        for match in re.finditer(r"(?<![/\w-])inspect-swarm(?=\s|$)", line):
            rest = line[match.end() :].split("`", 1)[0]
            lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            try:
                tokens = list(lexer)
            except ValueError:  # a quote the line does not close
                tokens = rest.split()
            words = []
            for token in tokens:
                if token and set(token) <= set("|;&<>()"):
                    break
                words.append(token.strip("[]"))
            found.append(words)
    return found


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_named_commands_and_flags_exist(page: Path) -> None:
    top = _help()
    assert top is not None, "inspect-swarm --help failed"
    wrong: list[str] = []
    for words in _invocations(page):
        command: list[str] = []
        for word in words:
            here = _help(*command) or ""
            if word.startswith("--"):
                flag = word.split("=", 1)[0]
                if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", here + top):
                    wrong.append(f"`inspect-swarm {' '.join(command)}` has no {flag}")
            elif word.startswith("-") or not _subcommands(here):
                continue  # a short flag, or the command's own arguments
            elif word in _subcommands(here):
                command.append(word)
            else:
                wrong.append(f"`inspect-swarm {' '.join(command)}` has no command {word!r}")
                break
    assert not wrong, f"{page.name}: " + "; ".join(sorted(set(wrong)))


# `pip install inspect-swarm` (any spelling, extras or not) would take a package of that name
# from the index, which is not this project: a page installs it from a checkout or a wheel.
_FROM_INDEX = re.compile(
    r"pip3? install\s[^\n]*?(?<![\w./@-])[\"']?inspect[-_.]swarm\b(?!\S*\s*@)", re.I
)


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_the_project_is_never_installed_from_the_index(page: Path) -> None:
    found = [m.group(0) for m in _FROM_INDEX.finditer(_text(page))]
    assert not found, f"{page.name}: {found}: install from a checkout (pip install '.[extra]')"


@pytest.mark.parametrize(
    ("line", "from_index"),
    [
        ('pip install "inspect-swarm[ray]"', True),
        ("pip install inspect_swarm", True),
        ("pip install -U Inspect-Swarm==0.1", True),
        ("pip install '.[ray]'", False),
        ("pip install dist/inspect_swarm-0.1.0-py3-none-any.whl", False),
        ('pip install "inspect_swarm[ray] @ file:///srv/inspect_swarm"', False),
    ],
)
def test_an_install_from_the_index_is_recognised(line: str, from_index: bool) -> None:
    assert bool(_FROM_INDEX.search(line)) is from_index
