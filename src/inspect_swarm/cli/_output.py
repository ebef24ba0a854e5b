"""What the CLI prints: tables on a terminal, tab-separated lines in a pipe, JSON when asked.

On a terminal, listings are rich tables with headers and one record is a grid of its fields;
in a pipe, each row is one line of tab-separated values, without a header (as gh prints them)
but for the tables of logs, and times are ISO 8601. `--json` prints the API's own objects. rich is imported only to draw
on a terminal, so the CLI starts fast in scripts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

SHORT_ID = 12
"""How much of a run id a terminal shows (any unique prefix is taken back)."""
_TAIL_LINES = 3
"""How many lines of a failed sandbox's stderr the summary shows."""
_FAILURES_SHOWN = 5


class Output:
    """Where and how a command prints its data."""

    def __init__(self, as_json: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.as_json = as_json
        self.terminal = self.stream.isatty()

    def json(self, data: Any) -> None:
        """The API's objects, as JSON."""
        self.line(json.dumps(data, indent=2))

    def line(self, text: str = "") -> None:
        """One line of text."""
        self.stream.write(text + "\n")

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[str]], *, piped_header: bool = False
    ) -> None:
        """Rows under headers on a terminal; tab-separated lines in a pipe, under a line of the
        headers with `piped_header`."""
        if not self.terminal:
            for row in [headers, *rows] if piped_header else rows:
                self.line("\t".join(row))
            return
        from rich.table import Table

        table = Table(box=None, header_style="bold", pad_edge=False)
        for header in headers:
            # a narrow terminal folds the cells, never a header's word
            table.add_column(header, overflow="fold", min_width=len(header))
        for row in rows:
            table.add_row(*row)
        self._print(table)

    def fields(self, pairs: Sequence[tuple[str, str]]) -> None:
        """One record's fields: a grid on a terminal, `name:<TAB>value` lines in a pipe."""
        if not self.terminal:
            for name, value in pairs:
                self.line(f"{name.lower()}:\t{value}")
            return
        from rich.table import Table

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column(overflow="fold")
        for name, value in pairs:
            grid.add_row(name, value)
        self._print(grid)

    def _print(self, renderable: Any) -> None:
        from rich.console import Console

        Console(file=self.stream, highlight=False).print(renderable)

    def short(self, run_id: str) -> str:
        """A run id as this output shows it: a prefix on a terminal, whole in a pipe."""
        return run_id[:SHORT_ID] if self.terminal else run_id

    def when(self, timestamp: str | None) -> str:
        """A time: how long ago (or how soon) on a terminal, ISO 8601 in a pipe."""
        if not timestamp:
            return "-"
        if not self.terminal:
            return timestamp
        seconds = (datetime.now(UTC) - _parse_time(timestamp)).total_seconds()
        return f"{duration(seconds)} ago" if seconds >= 0 else f"in {duration(-seconds)}"


def _parse_time(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def duration(seconds: float | None) -> str:
    """`45s`, `3m05s`, `2h10m` (`-` when unknown)."""
    if seconds is None:
        return "-"
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _span(sandbox: Mapping[str, Any]) -> float | None:
    start, end = sandbox.get("startedAt"), sandbox.get("endedAt")
    if not start or not end:
        return None
    return (_parse_time(end) - _parse_time(start)).total_seconds()


# runs


def run_status(run: Mapping[str, Any]) -> str:
    """The run's status, saying `cancelled` for a run that ended by its cancel."""
    counts = run.get("counts") or {}
    if run.get("status") == "completed" and counts.get("cancelled"):
        return "cancelled"
    return str(run.get("status", "?"))


def progress_line(run: Mapping[str, Any], short: bool = True, status: str | None = None) -> str:
    """The run's id, status (`status` if given) and `progress` on one line."""
    line = f"{_id(run, short)} {status or run_status(run)}, {run.get('count', '?')} sandboxes: "
    return line + progress(run)


def progress(run: Mapping[str, Any]) -> str:
    """Where the run's sandboxes are: queued, booting, running and done add up to its count,
    and what is done is split by outcome."""
    counts = run.get("counts") or {}
    done = run.get("done", sum(counts.get(s, 0) for s in ("succeeded", "failed", "cancelled")))
    parts = [f"{counts[s]} {s}" for s in ("queued", "booting", "running") if counts.get(s)]
    outcomes = [f"{counts[s]} {s}" for s in ("succeeded", "failed", "cancelled") if counts.get(s)]
    parts.append(f"{done} done" + (f" ({', '.join(outcomes)})" if outcomes else ""))
    text = ", ".join(parts)
    if run.get("waitingReason"):
        text += f"; waiting: {run['waitingReason']}"
    return text


def _id(run: Mapping[str, Any], short: bool) -> str:
    run_id = str(run.get("id", ""))
    return run_id[:SHORT_ID] if short else run_id


def runs_table(output: Output, runs: Sequence[Mapping[str, Any]]) -> None:
    """`swarms list`."""
    rows = [
        [
            output.short(str(run["id"])),
            run.get("name") or "-",
            run_status(run),
            f"{run.get('done', 0)}/{run.get('count', '?')}",
            str((run.get("counts") or {}).get("succeeded", 0)),
            str((run.get("counts") or {}).get("failed", 0)),
            output.when(run.get("createdAt")),
        ]
        for run in runs
    ]
    output.table(["ID", "NAME", "STATUS", "DONE", "SUCCEEDED", "FAILED", "CREATED"], rows)


def run_fields(output: Output, run: Mapping[str, Any]) -> None:
    """`swarms get`: the run's fields, then its sandboxes."""
    command = run.get("command")
    size = run.get("size") or {}
    pairs = [
        ("ID", str(run.get("id"))),
        ("Name", run.get("name") or "-"),
        ("Status", run_status(run)),
        ("Progress", progress(run)),
        ("Command", command if isinstance(command, str) else json.dumps(command)),
        ("Size", f"{size.get('vcpus', '?')} vCPU, {size.get('memoryGb', '?')} GB"),
        ("Timeout", duration(run.get("timeoutSeconds"))),
        ("Created", output.when(run.get("createdAt"))),
        ("Duration", duration(run.get("durationSeconds"))),
    ]
    pairs += [(label, str(run[key])) for label, key in _EXTRA_RUN_FIELDS if run.get(key)]
    output.fields(pairs)
    output.line()
    sandboxes_table(output, run.get("sandboxes") or [])


_EXTRA_RUN_FIELDS = (("Waiting", "waitingReason"), ("Error", "error"))


def outcome(sandbox: Mapping[str, Any]) -> str:
    """What became of a sandbox: its error (a timeout, a boot failure), else its exit code."""
    if sandbox.get("error"):
        return str(sandbox["error"])
    if sandbox.get("exitCode") is not None:
        return f"exit code {sandbox['exitCode']}"
    return "-"


def sandboxes_table(output: Output, sandboxes: Sequence[Mapping[str, Any]]) -> None:
    """A run's sandboxes (`swarms get` and `swarms results`)."""
    rows = [
        [
            str(s.get("index")),
            str(s.get("sandboxId")),
            str(s.get("status")),
            outcome(s),
            duration(_span(s)),
            _first_line(s.get("result")),
        ]
        for s in sandboxes
    ]
    output.table(["INDEX", "SANDBOX", "STATUS", "OUTCOME", "TIME", "RESULT"], rows)


def _first_line(text: str | None, most: int = 60) -> str:
    if not text:
        return "-"
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= most else line[: most - 3] + "..."


def summary(run: Mapping[str, Any], short_id: str) -> list[str]:
    """What a finished run did: its counts, then each failed sandbox (status, exit code or
    reason, its stderr's last lines) and the command that shows more."""
    counts = run.get("counts") or {}
    outcomes = [f"{counts.get(s, 0)} {s}" for s in ("succeeded", "failed", "cancelled")]
    lines = [f"{run_status(run)}: {', '.join(outcomes)}"]
    failed = [s for s in run.get("sandboxes") or [] if s.get("status") == "failed"]
    for sandbox in failed[:_FAILURES_SHOWN]:
        lines.append(
            f"sandbox {sandbox.get('index')} ({sandbox.get('sandboxId')}) failed: "
            f"{outcome(sandbox)}"
        )
        tail = (sandbox.get("stderrTail") or "").rstrip("\n").splitlines()[-_TAIL_LINES:]
        lines += [f"    {line}" for line in tail] or ["    (nothing on stderr)"]
    if len(failed) > _FAILURES_SHOWN:
        lines.append(f"... and {len(failed) - _FAILURES_SHOWN} more failed")
    if failed:
        lines.append(f"see more: inspect-swarm swarms logs {short_id} {failed[0].get('index')}")
    return lines


def logs(output: Output, sandboxes: Sequence[Mapping[str, Any]]) -> None:
    """Each sandbox's stdout and stderr tails, each under a header (as `tail` heads files)."""
    for sandbox in sandboxes:
        about = (
            f"sandbox {sandbox.get('index')} ({sandbox.get('sandboxId')}, "
            f"{sandbox.get('status')}: {outcome(sandbox)})"
        )
        streams = [(n, sandbox.get(f"{n}Tail") or "") for n in ("stdout", "stderr")]
        streams = [(name, text) for name, text in streams if text]
        if not streams:
            output.line(f"==> {about}: no output <==")
        for name, text in streams:
            output.line(f"==> {about} {name} <==")
            output.stream.write(text if text.endswith("\n") else text + "\n")


# long-lived sandboxes, and any sandbox's record


def long_lived_table(output: Output, sandboxes: Sequence[Mapping[str, Any]]) -> None:
    """`sandboxes list`."""
    rows = [
        [
            str(s.get("sandboxId")),
            str(s.get("status")),
            str(s.get("template") or "-"),
            _size(s.get("size")),
            output.when(s.get("startedAt")),
            output.when(s.get("endAt")),
        ]
        for s in sandboxes
    ]
    output.table(["SANDBOX", "STATUS", "TEMPLATE", "SIZE", "STARTED", "ENDS"], rows)


def _size(size: Mapping[str, Any] | None) -> str:
    return "-" if not size else f"{size.get('vcpus', '?')}x{size.get('memoryGb', '?')}"


_SANDBOX_FIELDS = (
    ("ID", "sandboxId"),
    ("Status", "status"),
    ("Run", "swarmId"),
    ("Index", "index"),
    ("Exit code", "exitCode"),
    ("Error", "error"),
    ("Template", "template"),
    ("Started", "startedAt"),
    ("Ends at", "endAt"),
    ("Ended", "endedAt"),
    ("End reason", "endReason"),
)


def sandbox_fields(output: Output, sandbox: Mapping[str, Any]) -> None:
    """`sandboxes get`: a long-lived sandbox's fields, or a run's sandbox's."""
    pairs = [
        (label, str(sandbox[key]))
        for label, key in _SANDBOX_FIELDS
        if sandbox.get(key) not in (None, "")
    ]
    if sandbox.get("size"):
        pairs.insert(3, ("Size", _size(sandbox["size"])))
    pairs += [(f"metadata {k}", str(v)) for k, v in (sandbox.get("metadata") or {}).items()]
    output.fields(pairs)
