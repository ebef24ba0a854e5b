import json
from collections.abc import Callable
from typing import Any

from inspect_ai.analysis import Column, SampleColumn
from inspect_ai.log import EvalSample, EvalSampleSummary

from .._contracts._schema import LEDGER_KEY, METRICS_KEY, RESULT_KEY, SwarmLedger
from ._read import priced_cost, unpriced_models


def swarm_ledger(sample: EvalSample) -> SwarmLedger | None:
    """Read the swarm's ledger from a sample.

    Args:
        sample: A sample read from a log together with its store, as `read_eval_log()` gives
            it. Where the sample ran two swarms, only the later one's ledger is there.

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
"""Columns for `inspect_ai.analysis.samples_df()`: what each sample really cost, and what the
swarm's ledger tells of it. Use them as in
`samples_df(logs, columns=SampleSummary + SwarmColumns)`; the guide's Analysis page describes
each column."""


def _record(key: str) -> Callable[[EvalSample | EvalSampleSummary], dict[str, Any] | None]:
    def read(sample: EvalSample | EvalSampleSummary) -> dict[str, Any] | None:
        data = sample.store.get(key) if isinstance(sample, EvalSample) else None
        return data if isinstance(data, dict) else None

    return read


_result, _ledger_data, _metrics = _record(RESULT_KEY), _record(LEDGER_KEY), _record(METRICS_KEY)


def _outcome(
    record: Callable[[EvalSample | EvalSampleSummary], dict[str, Any] | None],
    value: Callable[[dict[str, Any]], Any],
) -> Callable[[EvalSample | EvalSampleSummary], Any]:
    def read(sample: EvalSample | EvalSampleSummary) -> Any:
        data = record(sample)
        return None if data is None else value(data)

    return read


SwarmOutcomeColumns: list[Column] = [
    SampleColumn(
        "swarm_stop_reason", path=_outcome(_ledger_data, lambda d: d["stop_reason"]), full=True
    ),
    SampleColumn("swarm_ended_by", path=_outcome(_ledger_data, lambda d: d["ended_by"]), full=True),
    SampleColumn(
        "swarm_answer_member", path=_outcome(_result, lambda d: d["final"]["member"]), full=True
    ),
    SampleColumn(
        "swarm_answer_mode", path=_outcome(_result, lambda d: d["final"]["mode"]), full=True
    ),
    SampleColumn(
        "swarm_steps_to_answer",
        path=_outcome(_metrics, lambda d: d["steps_to_answer"]),
        type=int,
        full=True,
    ),
    SampleColumn(
        "swarm_members_submitted",
        path=_outcome(_result, lambda d: sum(m["submitted"] for m in d["members"])),
        type=int,
        full=True,
    ),
    SampleColumn(
        "swarm_members_never_acted",
        path=_outcome(_metrics, lambda d: len(d["never_acted"])),
        type=int,
        full=True,
    ),
    SampleColumn(
        "swarm_wall_clock",
        path=_outcome(_metrics, lambda d: d["wall_clock"]),
        type=float,
        full=True,
    ),
]
"""Columns for `inspect_ai.analysis.samples_df()` with how each sample's swarm ended: why it
stopped, which member's submission is the answer and how it was chosen, the steps that
answer took, how many members submitted and how many never acted, and its wall clock. The
`inspect_swarm.analysis` module docstring lists every column."""
