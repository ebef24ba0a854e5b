"""The documentation's code blocks run, offline, in the order a reader meets them."""

from pathlib import Path

import pytest

from .pages import DOCS, ROOT, markers, reason_ok, run_page

PAGES = [
    ROOT / "README.md",
    *sorted(p for p in DOCS.rglob("*.md") if "reference" not in p.parts),
]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_page_blocks_run(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_skip_says_why(page: Path) -> None:
    unknown = [(line, text) for line, text in markers(page) if not reason_ok(text)]
    assert not unknown, f"skip markers without a known reason in {page.name}: {unknown}"
