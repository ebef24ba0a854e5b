"""Runs of words that the project's prose shares with the spec it was built from.

The spec is another team's document: the project takes its facts, names and signatures, never
its sentences. This module finds every run of `RUN` or more words that the README, the pages
of `docs/` or a docstring in `src/` shares with the spec, as `prose_overlap.py` of the shared
hooks does: words lowercased, punctuation dropped, fenced code blocks left out (code and
signatures are not prose). It reads attribute docstrings too (a string right after an
assignment), since the API reference shows them.

The spec lives beside the project's checkout (`../shared/spec`, or `../../shared/spec` for a
git worktree in a folder of worktrees); a clone without it has nothing to compare with.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

RUN = 15
"""The shortest shared run that counts as copied prose."""

_WORD = re.compile(r"[a-z0-9_@.'-]+")
_FENCE = re.compile(r"```.*?```", flags=re.S)


@dataclass(frozen=True)
class Run:
    """A run of words shared with the spec: where it is, and its words."""

    where: str
    words: str

    def __str__(self) -> str:
        return f"{self.where}: {self.words}"


def spec_dir(root: Path) -> Path | None:
    """The spec's folder beside the checkout at `root`, or None when there is none."""
    for parent in (root.parent, root.parent.parent):
        candidate = parent / "shared" / "spec"
        if candidate.is_dir() and any(candidate.glob("*.txt")):
            return candidate
    return None


def words(text: str) -> list[str]:
    """The text's words, lowercased, without the punctuation around them."""
    return [w.strip(".'-") for w in _WORD.findall(text.lower()) if w.strip(".'-")]


def _docstrings(tree: ast.Module) -> Iterator[tuple[str, int, str]]:
    """Every docstring of a module: its owner's name, line and text."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, str]]:
        body = getattr(node, "body", [])
        for previous, item in zip([None, *body], body, strict=False):
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{item.name}"
                doc = ast.get_docstring(item)
                if doc:
                    yield name, item.lineno, doc
                yield from walk(item, f"{name}.")
            elif (
                isinstance(item, ast.Expr)
                and isinstance(item.value, ast.Constant)
                and isinstance(item.value.value, str)
                and isinstance(previous, (ast.Assign, ast.AnnAssign))
            ):
                target = (
                    previous.targets[0] if isinstance(previous, ast.Assign) else previous.target
                )
                name = f"{prefix}{ast.unparse(target)}"
                yield name, item.lineno, item.value.value

    doc = ast.get_docstring(tree)
    if doc:
        yield "(module)", 1, doc
    yield from walk(tree, "")


def project_texts(root: Path) -> Iterator[tuple[str, str]]:
    """The project's prose, each piece with where it is (file, and owner for a docstring)."""
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        if path.is_file():
            yield str(path.relative_to(root)), _FENCE.sub(" ", path.read_text(errors="replace"))
    # the stubs (`.pyi`) too: IDEs show their docstrings
    for path in sorted([*(root / "src").rglob("*.py"), *(root / "src").rglob("*.pyi")]):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        for owner, line, doc in _docstrings(tree):
            yield f"{path.relative_to(root)}:{line} {owner}", doc


def shared_runs(spec: Path, root: Path, run: int = RUN) -> list[Run]:
    """Every run of `run` or more words that the project's prose shares with the spec."""
    grams: set[tuple[str, ...]] = set()
    for path in sorted(spec.glob("*.txt")):
        ws = words(_FENCE.sub(" ", path.read_text(errors="replace")))
        grams.update(tuple(ws[i : i + run]) for i in range(len(ws) - run + 1))
    found: list[Run] = []
    for where, text in project_texts(root):
        ws = words(text)
        i = 0
        while i <= len(ws) - run:
            if tuple(ws[i : i + run]) not in grams:
                i += 1
                continue
            j = i + run
            while j < len(ws) and tuple(ws[j - run + 1 : j + 1]) in grams:
                j += 1
            found.append(Run(where, " ".join(ws[i:j])))
            i = j
    return found


if __name__ == "__main__":
    import sys

    ROOT = Path(__file__).parents[2]
    SPEC = spec_dir(ROOT)
    if SPEC is None:
        sys.exit("no ../shared/spec beside the project: nothing to compare with")
    RUNS = shared_runs(SPEC, ROOT)
    print(*RUNS, f"{len(RUNS)} runs of {RUN}+ words shared with the spec", sep="\n")
    sys.exit(1 if RUNS else 0)
