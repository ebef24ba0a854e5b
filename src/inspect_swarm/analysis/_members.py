"""`members_df()`: one row per member of each swarm, built on `samples_df()`."""

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from inspect_ai.analysis import (
    Column,
    ColumnError,
    EvalModel,
    EvalTask,
    SampleColumn,
    samples_df,
)
from inspect_ai.analysis._dataframe.evals.columns import EvalLogPath
from inspect_ai.log import EvalLog, EvalSample, EvalSampleSummary

from .._contracts._schema import LEDGER_KEY, METRICS_KEY, RESULT_KEY

if TYPE_CHECKING:
    import pandas as pd

_ROWS = "swarm_member_rows"
_EVAL = ("task_name", "task_arg_*", "solver", "solver_args", "model")
_SKIPPED = {"events", "messages", "attachments"}
_UNWIRED = ("tools_unwired", "notify_unwired")
"""The metrics' lists of members that missed the channels' tools or notices."""


def _member_rows(sample: EvalSample | EvalSampleSummary) -> str:
    rows = member_rows(sample.store, sample.scores) if isinstance(sample, EvalSample) else []
    return json.dumps(rows)


_COLUMNS: list[Column] = [
    *[c for c in [*EvalLogPath, *EvalTask, *EvalModel] if c.name in ("log", *_EVAL)],
    SampleColumn("id", path="id", required=True, type=str),
    SampleColumn("epoch", path="epoch", required=True),
    SampleColumn(_ROWS, path=_member_rows, full=True),
]


@overload
def members_df(
    logs: str | Sequence[str] | EvalLog | Sequence[EvalLog] | None = None,
    columns: Sequence[Column] = (),
    strict: Literal[True] = True,
    parallel: bool | int = False,
    quiet: bool | None = None,
) -> "pd.DataFrame": ...


@overload
def members_df(
    logs: str | Sequence[str] | EvalLog | Sequence[EvalLog] | None = None,
    columns: Sequence[Column] = (),
    strict: Literal[False] = False,
    parallel: bool | int = False,
    quiet: bool | None = None,
) -> tuple["pd.DataFrame", list[ColumnError]]: ...


def members_df(
    logs: str | Sequence[str] | EvalLog | Sequence[EvalLog] | None = None,
    columns: Sequence[Column] = (),
    strict: bool = True,
    parallel: bool | int = False,
    quiet: bool | None = None,
) -> "pd.DataFrame | tuple[pd.DataFrame, list[ColumnError]]":
    """Read a dataframe with one row per member of each swarm, per sample and epoch.

    Each row has the sample's ids as `samples_df()` names them (`eval_id`, `sample_id`, `id`,
    `epoch`), the log and the eval's task, arm parameters (`task_arg_*`, `solver_args`) and
    model, then the member's:

    - `member`, `role`, `status`, `state`, `submitted`, and `answer` (its submission is the
      swarm's answer).
    - `time` (seconds from the swarm's start to the member's end), `running_time`, `steps`,
      `tokens`, `cost`, `calls`, `submissions`, `bridged`, `cancelled`,
      `background_started`, `background_cancelled`, `longest_identical_tool_run`.
    - `gate_checks`, `gate_passes`, `first_pass_time`.
    - `tools_unwired`, `notify_unwired`: it missed the channels' tools or notices (the
      metrics' wiring checks).
    - `delivery`, and per channel with records `comm_<channel>_records`, `_record_bytes`,
      `_rejections` (all limits together), `_reads`, `_listings` and `_notices`.
    - `waits`, `wait_time`, `idle_time` and `waits_<outcome>` per outcome.
    - `score_<scorer>`: its own score from each `member_scores()` scorer (null for a member
      that did not submit).

    Samples without a swarm have no rows. Needs the `analysis` extra (pandas and pyarrow).

    Args:
        logs: One or more log files or directories, or `EvalLog`s (default: the log
            directory, as for `samples_df()`).
        columns: More eval or sample columns to add to each row (`EvalColumn`s and
            `SampleColumn`s, such as `EvalConfiguration` or `SwarmOutcomeColumns`).
        strict: Raise import errors at once; if `False`, return the errors beside the
            dataframe, as `samples_df()` does.
        parallel: Read logs in parallel, as `samples_df()` does.
        quiet: Show no progress.
    """
    import pandas as pd

    read = samples_df(
        logs,
        columns=[*_COLUMNS, *columns],
        strict=strict,  # type: ignore[call-overload]
        parallel=parallel,
        quiet=quiet,
        exclude_fields=_SKIPPED,
    )
    samples, errors = read if isinstance(read, tuple) else (read, [])
    rows = samples.pop(_ROWS).map(json.loads)
    exploded = samples.assign(**{_ROWS: rows}).explode(_ROWS).dropna(subset=[_ROWS])
    members = pd.json_normalize(exploded[_ROWS].tolist())
    df = pd.concat([exploded.drop(columns=[_ROWS]).reset_index(drop=True), members], axis=1)
    return df if strict else (df, errors)


def member_rows(store: dict[str, Any], scores: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each member's row from a sample's store and scores (none without a swarm)."""
    result, ledger, metrics = (store.get(key) for key in (RESULT_KEY, LEDGER_KEY, METRICS_KEY))
    if result is None or ledger is None or metrics is None:
        return []
    own_scores = {
        name: score.metadata["members"]
        for name, score in (scores or {}).items()
        if score.metadata and "member_scoring" in score.metadata
    }
    answer = result["final"]["member"]
    unwired = {key: set(metrics[key]) for key in _UNWIRED}
    return [
        _row(entry, own, m, answer, own_scores, unwired)
        for entry, own, m in zip(
            result["members"], ledger["members"], metrics["members"], strict=True
        )
    ]


def _row(
    entry: dict[str, Any],
    own: dict[str, Any],
    m: dict[str, Any],
    answer: str | None,
    own_scores: dict[str, dict[str, Any]],
    unwired: dict[str, set[str]],
) -> dict[str, Any]:
    name = entry["name"]
    row: dict[str, Any] = {
        "member": name,
        "role": entry["role"],
        "status": entry["status"],
        "state": entry["state"],
        "submitted": entry["submitted"],
        "answer": name == answer,
        "time": entry["time"],
        "running_time": m["running_time"],
        "steps": m["steps"],
        "tokens": m["tokens"],
        "cost": m["cost"],
        "calls": own["calls"]["calls"],
        "submissions": m["submissions"],
        "bridged": own["bridged"],
        "cancelled": own["cancelled"],
        "background_started": own["background_started"],
        "background_cancelled": own["background_cancelled"],
        "longest_identical_tool_run": m["longest_identical_tool_run"],
        "gate_checks": entry["gate_checks"],
        "gate_passes": entry["gate_passes"],
        "first_pass_time": entry["first_pass_time"],
        "delivery": m["delivery_effective"],
        "waits": m["waits"],
        "wait_time": m["wait_time"],
        "idle_time": m["idle_time"],
        **{key: name in members for key, members in unwired.items()},
    }
    for channel, comm in (m["comm"] or {}).items():
        for field in ("records", "record_bytes", "reads", "listings", "notices"):
            row[f"comm_{channel}_{field}"] = comm[field]
        row[f"comm_{channel}_rejections"] = sum(comm["rejections"].values())
    for outcome, count in (m["waits_by_outcome"] or {}).items():
        row[f"waits_{outcome}"] = count
    for scorer, values in own_scores.items():
        row[f"score_{scorer}"] = values.get(name)
    return row
