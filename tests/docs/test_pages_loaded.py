"""The guide's examples give the same result on a loaded machine: each page whose blocks order
swarm members runs again with every script `loaded()` (its members slowed, the first named the
most), and the page's own checks must hold as they do unloaded."""

from pathlib import Path

import pytest

import inspect_swarm.scripted

from ..loaded import loaded_model
from .pages import ROOT, run_page

PAGES = [
    "README.md",
    *(
        f"docs/{name}.md"
        for name in (
            "budgets",
            "controllers",
            "members",
            "messages-tasks-notes",
            "sandboxes",
            "scoring",
            "scripted-model",
        )
    ),
]
"""The pages whose scripts decide who answers, who is stopped or what a member sees by the
order of the members' calls."""


@pytest.mark.parametrize("page", PAGES)
def test_a_page_gives_its_results_on_a_loaded_machine(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = inspect_swarm.scripted.scripted_model
    monkeypatch.setattr(inspect_swarm.scripted, "scripted_model", loaded_model(real))
    run_page(ROOT / page, tmp_path)
