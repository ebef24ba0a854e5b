"""Every public name has a docstring, and the API reference shows every public name.

The public names are the exports of the public modules and what the reference pages show
(`::: path`), with their public members. They are read as the reference reads them, with
griffe (mkdocstrings' loader), so what passes here is what the site shows. A function's
Google-style `Args:` names each of its parameters and no other; a class's constructor
parameters are named in its `Args:` or documented as its attributes (dataclass and pydantic
fields).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import griffe
import pytest
import yaml

from .pages import DOCS, ROOT

MODULES = [
    "inspect_swarm",
    "inspect_swarm.analysis",
    "inspect_swarm.scripted",
    "inspect_swarm.sandbox",
    "inspect_swarm.client",
]
"""The modules whose exports are the public API (the Swarms API client is `client`'s exports)."""

HIDDEN = {"model_config"}
"""Members the reference hides (pydantic's configuration is no part of the API)."""

REFERENCE = DOCS / "reference"
_DIRECTIVE = re.compile(r"^::: *(\S+)", flags=re.M)


def _package() -> griffe.Module:
    loader = griffe.GriffeLoader(
        search_paths=[str(ROOT / "src")], docstring_parser=griffe.Parser.google
    )
    package = loader.load("inspect_swarm")
    loader.resolve_aliases(implicit=False, external=None)
    assert isinstance(package, griffe.Module)
    return package


PACKAGE = _package()


def _lookup(path: str) -> griffe.Object:
    found = PACKAGE if path == "inspect_swarm" else PACKAGE[path.removeprefix("inspect_swarm.")]
    return found.final_target if isinstance(found, griffe.Alias) else found


def _exports(module: str) -> list[str]:
    exports = _lookup(module).exports
    assert exports, f"{module} has no __all__"
    return [f"{module}.{name}" for name in exports]


def _referenced() -> dict[str, Path]:
    shown: dict[str, Path] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for path in _DIRECTIVE.findall(page.read_text()):
            shown[path] = page
    return shown


PUBLIC = [name for module in MODULES for name in _exports(module)]
SHOWN = _referenced()


def _documented(
    docstring: griffe.Docstring | None, *kinds: griffe.DocstringSectionKind
) -> set[str]:
    if docstring is None:
        return set()
    return {
        item.name.lstrip("*")
        for section in docstring.parsed
        if section.kind in kinds
        for item in section.value
    }


def _parameters(function: griffe.Function) -> list[str]:
    return [p.name for p in function.parameters if p.name not in ("self", "cls")]


def _is_property(obj: griffe.Object) -> bool:
    return "property" in obj.labels


def _function_problems(function: griffe.Function, path: str) -> Iterator[str]:
    if _is_property(function):
        return
    params = _parameters(function)
    named = _documented(function.docstring, griffe.DocstringSectionKind.parameters)
    missing = [p for p in params if p not in named]
    if missing:
        yield f"{path}: its Args: does not name {missing}"
    stray = sorted(named - set(params))
    if stray:
        yield f"{path}: its Args: names {stray}, which are not parameters"


def _attributes(cls: griffe.Class) -> set[str]:
    """The class's attributes that are documented: in its own docstring, or in the class's
    `Attributes:` section."""
    own = {name for name, m in cls.members.items() if m.is_attribute and _has_docstring(m)}
    return own | _documented(cls.docstring, griffe.DocstringSectionKind.attributes)


def _has_docstring(obj: griffe.Object | griffe.Alias) -> bool:
    return obj.docstring is not None and bool(obj.docstring.value.strip())


def _class_problems(cls: griffe.Class, path: str) -> Iterator[str]:
    init = cls.members.get("__init__")
    if isinstance(init, griffe.Function):
        params = _parameters(init)
        named = (
            _documented(cls.docstring, griffe.DocstringSectionKind.parameters)
            | _documented(init.docstring, griffe.DocstringSectionKind.parameters)
            | _attributes(cls)
        )
        missing = [p for p in params if p not in named]
        if missing:
            yield f"{path}: its constructor's parameters {missing} are not documented"


def problems(obj: griffe.Object | griffe.Alias, path: str, listed: bool = False) -> Iterator[str]:
    """What a public object's documentation lacks, and its public members'.

    `listed`: the object is an attribute its class's `Attributes:` section documents.
    """
    if isinstance(obj, griffe.Alias):
        obj = obj.final_target
    if not (listed or _has_docstring(obj)):
        yield f"{path}: no docstring"
    if isinstance(obj, griffe.Function):
        yield from _function_problems(obj, path)
    if isinstance(obj, griffe.Class):
        yield from _class_problems(obj, path)
        attributes = _attributes(obj)
        for name, child in obj.members.items():
            if name.startswith("_") or name in HIDDEN or isinstance(child, griffe.Alias):
                continue
            yield from problems(child, f"{path}.{name}", child.is_attribute and name in attributes)


@pytest.mark.parametrize("path", sorted({*PUBLIC, *SHOWN}))
def test_public_name_is_documented(path: str) -> None:
    missing = list(problems(_lookup(path), path))
    assert not missing, "\n".join(missing)


def test_reference_shows_every_public_name() -> None:
    absent = [name for name in PUBLIC if name not in SHOWN]
    assert not absent, f"public names the API reference (docs/reference/) leaves out: {absent}"


def test_reference_hides_what_it_should() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    [plugin] = [p for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p]
    filters = plugin["mkdocstrings"]["handlers"]["python"]["options"]["filters"]
    for name in HIDDEN:
        assert any(f.startswith("!") and re.search(f[1:], name) for f in filters), (
            f"mkdocs.yml's mkdocstrings filters show {name!r}; hide it with a filter"
        )
