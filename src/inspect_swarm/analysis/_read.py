"""Reading swarms out of logs, and no more of each log than that takes.

A log's header and sample summaries come from inspect_ai's log API. A swarm's records are in
each sample's store, which the summaries leave out, and `read_eval_log_sample()` parses the
whole sample even with `exclude_fields` (it skips building the events, not reading them). In
an `.eval` log each sample is one JSON entry whose fields come in `EvalSample`'s order, with
`output`, `scores` and `store` before `events`: for a local `.eval` log the reader streams
each entry and stops once it has the swarm's records, so it reads a few kilobytes of each
sample rather than all of its events. Any other log (`.json`, or on a remote filesystem), or
an entry that does not read that way, is read through the log API.
"""

import os
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlparse

import ijson
from inspect_ai.log import (
    EvalLog,
    EvalSample,
    EvalSampleSummary,
    list_eval_logs,
    read_eval_log,
    read_eval_log_sample,
    read_eval_log_sample_summaries,
)

from .._contracts._schema import LEDGER_KEY, METRICS_KEY, RESULT_KEY
from .._contracts._summary import SwarmSummary, summarize, token_type_of

_RECORD_KEYS = (RESULT_KEY, LEDGER_KEY, METRICS_KEY)
_NOT_NEEDED = {"events", "messages", "attachments", "timelines"}


@dataclass(frozen=True)
class SwarmRecords:
    """A swarm's three records, as they are in the sample's store."""

    result: dict[str, Any]
    ledger: dict[str, Any]
    metrics: dict[str, Any]


@dataclass(frozen=True)
class SwarmSample:
    """One sample of a log (one epoch of it), with what its swarm recorded."""

    log: str
    eval_id: str
    task: str
    arm: dict[str, Any]
    """The eval's task arguments and solver arguments: what sets an arm apart in a sweep."""
    model: str
    id: int | str
    epoch: int
    scores: dict[str, Any]
    """Each scorer's score, as logged (`value`, `answer`, `explanation`, `metadata`)."""
    error: str | None
    limit: str | None
    token_limit_type: str | None
    cost: float
    """The sample's priced cost in dollars, from its `model_usage` (scorers' calls included)."""
    unpriced: list[str]
    """Models in the sample's `model_usage` with tokens and no cost."""
    answer: str | None
    """The sample's output, as text."""
    records: SwarmRecords | None
    """`None` for a sample with no swarm records."""

    @property
    def cost_complete(self) -> bool:
        """`cost` misses no call the swarm knows of: its ledger is complete and every model
        is priced."""
        return (
            self.records is not None
            and bool(self.records.ledger["total_complete"])
            and not self.unpriced
        )

    @cached_property
    def summary(self) -> SwarmSummary | None:
        """What the swarm did, as its summary event says it."""
        if self.records is None:
            return None
        return summarize(
            self.records.result,
            self.records.ledger,
            self.records.metrics,
            answer=self.answer,
            token_type=token_type_of(self.records.ledger["budget"], self.token_limit_type),
        )


_LOG_SUFFIXES = (".eval", ".json")


def log_files(log: str | os.PathLike[str]) -> list[str]:
    """The log itself, or the logs in a directory (its subdirectories too)."""
    text = os.fspath(log)
    if Path(text).is_dir():
        return sorted(info.name for info in list_eval_logs(text, recursive=True))
    if not Path(text).exists() and "://" not in text:
        raise FileNotFoundError(
            f"{text}: no such log or log directory. Give an .eval or .json log, or a directory "
            "of logs (inspect eval writes them to ./logs by default)."
        )
    if Path(text).suffix not in _LOG_SUFFIXES:
        raise ValueError(
            f"{text}: not an Inspect log. Give an .eval or .json log that inspect eval wrote, or "
            "a directory of logs."
        )
    return [text]


def read_swarm_samples(
    log: str | os.PathLike[str], sample: str | int | None = None
) -> list[SwarmSample]:
    """Each sample of a log or of every log in a directory, with its swarm's records: by task,
    arm (its task and solver arguments) and when its eval was created, then by id and epoch.

    Args:
        log: An `.eval` or `.json` log, or a directory of logs.
        sample: Only the sample with this id (every epoch of it).
    """
    headers = {location: read_eval_log(location, header_only=True) for location in log_files(log)}
    ordered = sorted(
        headers.items(),
        key=lambda h: (h[1].eval.task, arm_order(_arm(h[1])), h[1].eval.created, h[0]),
    )
    found: list[SwarmSample] = []
    for location, header in ordered:
        found.extend(_read_log(location, header, None if sample is None else str(sample)))
    return found


def arm_order(arm: dict[str, Any]) -> list[tuple[str, int, Any]]:
    """A sort key for arms: by argument, numbers by value."""
    return [
        (k, 0, v) if isinstance(v, int | float) and not isinstance(v, bool) else (k, 1, str(v))
        for k, v in arm.items()
    ]


def _arm(log: EvalLog) -> dict[str, Any]:
    return {**log.eval.task_args, **(log.eval.solver_args or {})}


def _read_log(location: str, header: EvalLog, sample: str | None) -> Iterator[SwarmSample]:
    if location.endswith(".json"):
        whole = read_eval_log(location)
        for s in whole.samples or []:
            if sample is None or str(s.id) == sample:
                yield _from_sample(whole, location, s)
        return
    summaries = [
        s for s in read_eval_log_sample_summaries(location) if sample is None or str(s.id) == sample
    ]
    summaries.sort(key=lambda s: (_id_order(s.id), s.epoch))
    with _Entries(location) as entries:
        for summary in summaries:
            stored = entries.read(summary.id, summary.epoch)
            yield SwarmSample(
                **_eval_fields(header, location),
                id=summary.id,
                epoch=summary.epoch,
                error=summary.error,
                limit=summary.limit,
                token_limit_type=summary.token_limit_type,
                **_usage(summary),
                **stored,
            )


def _id_order(sample_id: int | str) -> tuple[int, int | str]:
    return (0, sample_id) if isinstance(sample_id, int) else (1, str(sample_id))


def _eval_fields(log: EvalLog, location: str) -> dict[str, Any]:
    spec = log.eval
    return {
        "log": location,
        "eval_id": spec.eval_id,
        "task": spec.task,
        "arm": _arm(log),
        "model": spec.model,
    }


def _from_sample(log: EvalLog, location: str, s: EvalSample) -> SwarmSample:
    return SwarmSample(
        **_eval_fields(log, location),
        id=s.id,
        epoch=s.epoch,
        error=None if s.error is None else s.error.message,
        limit=None if s.limit is None else s.limit.type,
        token_limit_type=s.token_limit_type,
        **_usage(s),
        **_stored(
            s.output.completion,
            {name: score.model_dump(mode="json") for name, score in (s.scores or {}).items()},
            s.store,
        ),
    )


def priced_cost(sample: EvalSample | EvalSampleSummary) -> float:
    """The sample's priced cost in dollars, from its `model_usage`."""
    return sum(u.total_cost for u in sample.model_usage.values() if u.total_cost is not None)


def unpriced_models(sample: EvalSample | EvalSampleSummary) -> set[str]:
    """The models in the sample's `model_usage` with tokens but no cost."""
    return {
        model
        for model, usage in sample.model_usage.items()
        if usage.total_tokens > 0 and usage.total_cost is None
    }


def _usage(sample: EvalSample | EvalSampleSummary) -> dict[str, Any]:
    return {"cost": priced_cost(sample), "unpriced": sorted(unpriced_models(sample))}


def _stored(answer: str | None, scores: dict[str, Any], store: Mapping[str, Any]) -> dict[str, Any]:
    result, ledger, metrics = (store.get(key) for key in _RECORD_KEYS)
    records = (
        SwarmRecords(result, ledger, metrics)
        if isinstance(result, dict) and isinstance(ledger, dict) and isinstance(metrics, dict)
        else None
    )
    return {"answer": answer, "scores": scores, "records": records}


class _Entries:
    """The samples of one `.eval` log: streamed from a local zip, else read by the log API."""

    def __init__(self, location: str) -> None:
        self._location = location
        self._stack = ExitStack()
        self._zip: zipfile.ZipFile | None = None

    def __enter__(self) -> "_Entries":
        path = _local_path(self._location)
        if path is not None:
            try:
                self._zip = self._stack.enter_context(zipfile.ZipFile(path))
            except (OSError, zipfile.BadZipFile):
                self._zip = None
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def read(self, sample_id: int | str, epoch: int) -> dict[str, Any]:
        if self._zip is not None:
            try:
                with self._zip.open(f"samples/{sample_id}_epoch_{epoch}.json") as entry:
                    return _stream(entry)
            except (KeyError, ValueError, ijson.JSONError):
                pass  # not where or how this reader expects it: the log API reads it
        s = read_eval_log_sample(self._location, sample_id, epoch, exclude_fields=_NOT_NEEDED)
        return _stored(
            s.output.completion,
            {name: score.model_dump(mode="json") for name, score in (s.scores or {}).items()},
            s.store,
        )


def _local_path(location: str) -> str | None:
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return location if parsed.scheme == "" else None


def _stream(entry: IO[bytes]) -> dict[str, Any]:
    """A sample's answer, scores and swarm records, from its JSON up to the end of its
    store's records."""
    answer: str | None = None
    scores: dict[str, Any] = {}
    store: dict[str, Any] = {}
    events = ijson.parse(entry, use_float=True)
    for prefix, event, value in events:
        if prefix == "output.completion" and event == "string":
            answer = value
        elif prefix == "" and event == "map_key" and value == "scores":
            scores = _value(events) or {}
        elif prefix == "store" and event == "map_key" and value in _RECORD_KEYS:
            store[value] = _value(events)
            if len(store) == len(_RECORD_KEYS):
                break
        elif (prefix == "store" and event == "end_map") or (
            prefix == "" and event == "map_key" and value == "events"
        ):
            break
    return _stored(answer, scores, store)


def _value(events: Iterator[tuple[str, str, Any]]) -> Any:
    """Build the next value of a JSON stream, consuming its events."""
    builder = ijson.ObjectBuilder()
    depth = 0
    for _, event, value in events:
        builder.event(event, value)
        if event in ("start_map", "start_array"):
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
        if depth == 0:
            return builder.value
    raise ValueError("the sample's JSON ended inside a value")


def read_sample(log: str | os.PathLike[str], sample: str | int, epoch: int = 1) -> EvalSample:
    """One sample of a log, whole (its events included), by its id as text or as it is.

    Args:
        log: A log, or a directory in which exactly one log has the sample.
        sample: The sample's id.
        epoch: Its epoch.

    Raises:
        ValueError: No log, or more than one, has the sample.
    """
    found: list[tuple[str, int | str]] = []
    seen: set[str] = set()
    for location in log_files(log):
        for s in read_eval_log_sample_summaries(location):
            seen.add(f"{s.id} (epoch {s.epoch})")
            if str(s.id) == str(sample) and s.epoch == epoch:
                found.append((location, s.id))
    if len(found) != 1:
        where = ", ".join(location for location, _ in found)
        raise ValueError(
            f"{os.fspath(log)}: sample {sample!r} (epoch {epoch}) is in {len(found)} logs"
            + (f" ({where}): give the one to read." if found else "; its samples are: ")
            + ("" if found else ", ".join(sorted(seen)) or "none")
        )
    location, sample_id = found[0]
    return read_eval_log_sample(location, sample_id, epoch)
