"""`inspect-swarm show` and `inspect-swarm plot`: what the swarms in Inspect logs did.

Both read logs through inspect_ai, which they import only when they run: the parser and every
other command stay as light as before.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._output import Output

if TYPE_CHECKING:
    from .._contracts._summary import SwarmSummary
    from ..analysis._read import SwarmSample

AddParser = Callable[..., argparse.ArgumentParser]
"""`cli._main._parser` bound to the top-level commands: (name, one-line help, **kwargs)."""

_PLOTS = ("timeline", "sweep", "comm")
_FORMATS = (".png", ".svg")


def add_log_commands(add: AddParser) -> None:
    """Add `show` and `plot` to the top-level commands."""
    show = add("show", "what the swarms in a log (or a directory of logs) did")
    show.add_argument("log", metavar="LOG", help="an .eval or .json log, or a directory of logs")
    show.add_argument("--sample", metavar="ID", help="only this sample (every epoch of it)")
    show.add_argument("--json", action="store_true", help="print each sample as JSON")
    show.set_defaults(handler=show_log)

    plot = add("plot", "draw a swarm's timeline or communication, or a sweep (PNG or SVG)")
    plot.add_argument("view", choices=_PLOTS, help="what to draw")
    plot.add_argument("log", metavar="LOG", help="a log (a directory of logs for sweep)")
    plot.add_argument("--sample", metavar="ID", help="the sample (timeline and comm)")
    plot.add_argument("--epoch", type=int, default=1, help="the sample's epoch")
    plot.add_argument(
        "-o", "--output", type=Path, required=True, metavar="FILE", help="the .png or .svg to write"
    )
    plot.set_defaults(handler=plot_log)


def show_log(args: argparse.Namespace) -> int:
    """`show`."""
    from ..analysis._read import read_swarm_samples

    samples = read_swarm_samples(args.log, sample=args.sample)
    if not samples:
        where = f"sample with id {args.sample!r}" if args.sample is not None else "samples"
        raise ValueError(
            f"show: {args.log} has no {where}. Run `inspect-swarm show {args.log}` to list "
            "its samples."
        )
    output = Output(args.json)
    if output.as_json:
        output.json([_sample_json(s) for s in samples])
    elif Path(args.log).is_dir() and args.sample is None:
        _listing(output, samples)
    else:
        for index, s in enumerate(samples):
            if index:
                output.line()
            _detail(output, s)
    return 0


def _arm(s: SwarmSample) -> str:
    return " ".join(
        f"{k}={v if isinstance(v, str | int | float) else json.dumps(v)}" for k, v in s.arm.items()
    )


def _score(s: SwarmSample) -> str:
    if not s.scores:
        return "-"
    value = next(iter(s.scores.values())).get("value")
    return value if isinstance(value, str) else json.dumps(value)


def _listing(output: Output, samples: list[SwarmSample]) -> None:
    """A log directory: one line per sample."""
    rows = []
    for s in samples:
        summary = s.summary
        rows.append(
            [
                s.task,
                _arm(s) or "-",
                str(s.id),
                str(s.epoch),
                "no swarm" if summary is None else _answer(summary),
                "-" if summary is None else (summary.member or "-"),
                "-" if summary is None else (summary.stop_reason or summary.ended_by or "error"),
                "-" if summary is None else "; ".join(r.short() for r in summary.reached) or "-",
                _score(s),
                "-" if summary is None else f"{summary.cost:.4f}",
            ]
        )
    headers = [
        "TASK", "ARM", "SAMPLE", "EPOCH", "ANSWER", "FROM", "STOP", "REACHED", "SCORE", "COST $",
    ]  # fmt: skip
    output.table(headers, rows, piped_header=True)


def _answer(summary: SwarmSummary) -> str:
    """The answer's text, quoted on one line (`none` with no submission)."""
    from .._contracts._summary import quote_answer

    if summary.member is None:
        return "none"
    return quote_answer(summary.answer) if summary.answer else "(empty)"


def _detail(output: Output, s: SwarmSample) -> None:
    """One sample: its answer, stop, caps and shares reached, and its members table."""
    from .._contracts._summary import TABLE_HEADER, row_cells

    pairs = [
        ("Sample", f"{s.id} (epoch {s.epoch}) of {s.task}" + (f" [{_arm(s)}]" if s.arm else ""))
    ]
    summary = s.summary
    if summary is None:
        output.fields([*pairs, ("Swarm", "none: this sample has no swarm records")])
        return
    pairs += [("Answer", summary.answer_words()), ("Stopped", summary.stop_sentence())]
    if summary.also_reached():
        pairs.append(("Reached", "; ".join(r.words() for r in summary.also_reached())))
    if summary.unwired_words():
        pairs.append(("Unwired", summary.unwired_words()))
    pairs += [("Spent", summary.spent_words()), ("Score", _score(s))]
    if s.error:
        pairs.append(("Error", s.error.splitlines()[0]))
    output.fields(pairs)
    output.line()
    output.table(
        [h.upper() for h in TABLE_HEADER],
        [row_cells(row) for row in summary.members],
        piped_header=True,
    )


def _sample_json(s: SwarmSample) -> dict[str, Any]:
    return {
        "log": s.log,
        "eval_id": s.eval_id,
        "task": s.task,
        "arm": s.arm,
        "model": s.model,
        "id": s.id,
        "epoch": s.epoch,
        "scores": {name: score.get("value") for name, score in s.scores.items()},
        "error": s.error,
        "limit": s.limit,
        "swarm": None if s.summary is None else s.summary.as_json(),
    }


def plot_log(args: argparse.Namespace) -> int:
    """`plot`."""
    if args.output.suffix not in _FORMATS:
        raise ValueError(
            f"plot: -o {args.output} is neither .png nor .svg; name the file with the format "
            "to write, such as timeline.png or timeline.svg"
        )
    if args.view != "sweep" and args.sample is None:
        raise ValueError(f"plot {args.view}: which sample? Give --sample ID.")
    from ..analysis import _plots
    from ..analysis._read import read_sample

    if args.view == "sweep":
        figure = _plots.plot_sweep(args.log)
    else:
        draw = _plots.plot_timeline if args.view == "timeline" else _plots.plot_comm
        figure = draw(read_sample(args.log, args.sample, args.epoch))
    figure.savefig(args.output, format=args.output.suffix[1:], bbox_inches="tight")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
