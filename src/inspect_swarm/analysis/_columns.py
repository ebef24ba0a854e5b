import json
from collections.abc import Callable

from inspect_ai.analysis import Column, SampleColumn
from inspect_ai.log import EvalSample, EvalSampleSummary

from .._contracts._schema import LEDGER_KEY, SwarmLedger
from ._read import priced_cost, unpriced_models


def swarm_ledger(sample: EvalSample) -> SwarmLedger | None:
    """Read the swarm's ledger from a sample.

    Args:
        sample: A sample read from a log with its store, for example from `read_eval_log()`. A
            sample that runs two swarms keeps only the last one's ledger.

    Returns:
        The ledger, or None for a sample with no ledger.

    Raises:
        ValueError: The ledger has a version this inspect_swarm does not read.
    """
    data = sample.store.get(LEDGER_KEY)
    if data is None:
        return None
    version = data.get("version") if isinstance(data, dict) else None
    if version != 1:
        raise ValueError(
            f"swarm_ledger(): the ledger of sample {sample.id!r} has version={version!r}, and "
            "this inspect_swarm reads version 1 only. Read it with the inspect_swarm that wrote "
            f"it, or as a plain dict from sample.store[{LEDGER_KEY!r}]."
        )
    return SwarmLedger.model_validate(data)


def _ledger(sample: EvalSample | EvalSampleSummary) -> SwarmLedger | None:
    # the columns are full, so samples_df() passes whole samples
    return swarm_ledger(sample) if isinstance(sample, EvalSample) else None


def _complete(sample: EvalSample | EvalSampleSummary) -> bool:
    ledger = _ledger(sample)
    return ledger is not None and ledger.total_complete and not unpriced_models(sample)


def _members(sample: EvalSample | EvalSampleSummary) -> int | None:
    ledger = _ledger(sample)
    return None if ledger is None else len(ledger.members)


def _resumed(sample: EvalSample | EvalSampleSummary) -> bool:
    ledger = _ledger(sample)
    return ledger is not None and ledger.resumed


def _cap(kind: str) -> Callable[[EvalSample | EvalSampleSummary], float | None]:
    def read(sample: EvalSample | EvalSampleSummary) -> float | None:
        ledger = _ledger(sample)
        return None if ledger is None else ledger.caps.get(kind)

    return read


def _calls(field: str) -> Callable[[EvalSample | EvalSampleSummary], int | None]:
    def read(sample: EvalSample | EvalSampleSummary) -> int | None:
        ledger = _ledger(sample)
        return None if ledger is None else int(getattr(ledger.calls, field))

    return read


def _unpriced_models(sample: EvalSample | EvalSampleSummary) -> str | None:
    ledger = _ledger(sample)
    if ledger is None:
        return None
    return json.dumps(sorted(set(ledger.unpriced_models) | unpriced_models(sample)))


_cost_cap = _cap("cost")
_token_cap = _cap("tokens")
_time_cap = _cap("time")
_errored = _calls("errored")
_no_usage = _calls("no_usage")
_unpriced = _calls("unpriced")

SwarmColumns: list[Column] = [
    SampleColumn("swarm_cost", path=priced_cost, type=float, full=True),
    SampleColumn("swarm_complete", path=_complete, type=bool, full=True),
    SampleColumn("swarm_members", path=_members, type=int, full=True),
    SampleColumn("swarm_resumed", path=_resumed, type=bool, full=True),
    SampleColumn("swarm_cost_cap", path=_cost_cap, type=float, full=True),
    SampleColumn("swarm_token_cap", path=_token_cap, type=float, full=True),
    SampleColumn("swarm_time_cap", path=_time_cap, type=float, full=True),
    SampleColumn("swarm_errored", path=_errored, type=int, full=True),
    SampleColumn("swarm_no_usage", path=_no_usage, type=int, full=True),
    SampleColumn("swarm_unpriced", path=_unpriced, type=int, full=True),
    SampleColumn("swarm_unpriced_models", path=_unpriced_models, full=True),
]
"""Columns for `inspect_ai.analysis.samples_df()` with each sample's realized cost and what the
swarm's ledger says about it, as in `samples_df(logs, columns=SampleSummary + SwarmColumns)`. The
`inspect_swarm.analysis` module docstring lists every column."""
