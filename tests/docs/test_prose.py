"""The project's prose is its own: no run of words copied from the spec it was built from."""

import pytest

from .overlap import RUN, shared_runs, spec_dir
from .pages import ROOT


def test_no_run_shared_with_the_spec() -> None:
    spec = spec_dir(ROOT)
    if spec is None:
        pytest.skip(
            "no spec beside the project (../shared/spec or ../../shared/spec holds none): "
            "nothing to compare the prose with"
        )
    runs = shared_runs(spec, ROOT)
    assert not runs, (
        f"{len(runs)} runs of {RUN}+ words in the README, docs/ or docstrings repeat the spec; "
        "say each in the project's own words:\n" + "\n".join(map(str, runs))
    )
