"""The plots, drawn with matplotlib (the `viz` extra): a swarm's timeline, who read whose
writes, and score against realized cost per arm of a sweep. Each returns a matplotlib
`Figure`, which `savefig()` writes as PNG or SVG."""

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from inspect_ai.log import EvalSample

from .._contracts._schema import METRICS_KEY
from ._views import comm_reads, swarm_timeline, sweep_arms

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_COLOURS = {"model": "tab:blue", "tool": "tab:orange", "wait": "lightgrey"}
_SPAN_LABELS = {"model": "model call", "tool": "tool call", "wait": "swarm_wait"}
_SPAN_LABELS = {"model": "model call", "tool": "tool call", "wait": "swarm_wait"}
_MARKS = {"write": ("^", "tab:green"), "read": ("v", "tab:purple")}
_END_MARKS = {"submitted": ("*", "gold"), "cancelled": ("X", "tab:red")}


def _figure(width: float, height: float) -> "Figure":
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "The swarm plots need matplotlib: pip install 'inspect_swarm[viz]'."
        ) from None
    return Figure(figsize=(width, height), layout="constrained")


def _has_channel(sample: EvalSample) -> bool:
    """Whether the sample's swarm had a channel that records (its members' `comm` has one)."""
    metrics = sample.store.get(METRICS_KEY) or {}
    return any(m["comm"] for m in metrics.get("members", []))


def plot_timeline(sample: EvalSample) -> "Figure":
    """A swarm's run in time: one lane per member, with its model calls, tool calls and
    waits, its board writes and reads, and how it ended; the swarm's stop, and the grace
    period after it.

    Args:
        sample: A sample read with its events, such as `read_eval_log_sample()` returns.

    Returns:
        The figure (`swarm_timeline()` gives its data).
    """
    data = swarm_timeline(sample)
    lane = {name: i for i, name in enumerate(reversed(data.members))}
    figure = _figure(10, 1.2 + 0.45 * len(data.members))
    ax = figure.subplots()
    from matplotlib.artist import Artist
    from matplotlib.patches import Patch

    handles: list[Artist] = [Patch(color=c, label=_SPAN_LABELS[k]) for k, c in _COLOURS.items()]
    for kind, colour in _COLOURS.items():
        for name in data.members:
            bars = [
                (s.start, max(s.end - s.start, 0.002))
                for s in data.spans
                if s.kind == kind and s.member == name
            ]
            if bars:
                ax.broken_barh(bars, (lane[name] - 0.3, 0.6), color=colour)
    for kind, (marker, colour) in _MARKS.items():
        points = [(m.time, lane[m.member]) for m in data.marks if m.kind == kind]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(xs, ys, marker=marker, color=colour, zorder=3, label=f"board {kind}")
    for m in data.marks:
        if m.kind == "end":
            marker, colour = _END_MARKS.get(m.label, ("|", "black"))
            ax.scatter([m.time], [lane[m.member]], marker=marker, s=90, color=colour, zorder=4)
            ax.annotate(m.label, (m.time, lane[m.member] + 0.32), fontsize=7, ha="center")
    if data.stop is not None:
        ax.axvline(data.stop, color="tab:red", linestyle="--", label=f"stop ({data.stop_reason})")
        if data.grace_end is not None and data.grace_end > data.stop:
            ax.axvspan(data.stop, data.grace_end, color="tab:red", alpha=0.08, label="grace period")
    ax.set_yticks(list(lane.values()), list(lane))
    ax.set_ylim(-0.7, len(data.members) - 0.3)
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds since the swarm started")
    ax.set_title(f"Sample {sample.id} (epoch {sample.epoch})")
    handles += ax.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return figure


def plot_comm(sample: EvalSample) -> "Figure":
    """Who read whose writes: an arrow from each writer to each member that read its writes,
    as thick as the reads.

    Args:
        sample: A sample read with its events.

    Returns:
        The figure (`comm_reads()` gives its data).

    Raises:
        ValueError: The swarm had no channel that records.
    """
    reads = comm_reads(sample)
    if not reads and not _has_channel(sample):
        raise ValueError(
            f"plot comm: the swarm of sample {sample.id!r} (epoch {sample.epoch}) had no channel "
            "that records (filesystem only, or channels=[]), so there is no communication to "
            "draw. Use a channel such as shared_memory() to record who reads whom."
        )
    members = swarm_timeline(sample).members
    n = len(members)
    at = {
        name: (
            math.cos(math.pi / 2 - 2 * math.pi * i / n),
            math.sin(math.pi / 2 - 2 * math.pi * i / n),
        )
        for i, name in enumerate(members)
    }
    figure = _figure(6, 6)
    ax = figure.subplots()
    heaviest = max(reads.values(), default=1)
    for (writer, reader), count in reads.items():
        ax.annotate(
            "",
            xy=at[reader],
            xytext=at[writer],
            arrowprops={
                "arrowstyle": "-|>",
                "lw": 1 + 4 * count / heaviest,
                "color": "tab:blue",
                "shrinkA": 18,
                "shrinkB": 18,
                "connectionstyle": "arc3,rad=0.12",
            },
        )
        mid = ((at[writer][0] + at[reader][0]) / 2, (at[writer][1] + at[reader][1]) / 2)
        ax.annotate(str(count), mid, fontsize=9, color="tab:blue", ha="center")
    for name, (x, y) in at.items():
        ax.annotate(
            name, (x, y), ha="center", va="center", fontsize=10,
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "black"},
        )  # fmt: skip
    ax.set_xlim(-1.4, 1.4)
    ax.set_ylim(-1.4, 1.4)
    ax.set_aspect("equal")
    ax.axis("off")
    total = sum(reads.values())
    ax.set_title(f"Who read whose writes: sample {sample.id} (epoch {sample.epoch}), {total} reads")
    return figure


def plot_sweep(
    logs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    scorer: str | None = None,
    key: str = "answer",
) -> "Figure":
    """Score against realized cost, one point per arm of a sweep at its mean, with bars one
    standard deviation across its samples and epochs, and each sample behind it.

    Args:
        logs: A log, a directory of logs, or several.
        scorer: The scorer whose score to plot (default: each sample's first).
        key: For a scorer with a dict value (such as `member_scores()`), the key to plot.

    Returns:
        The figure (`sweep_arms()` gives its data). An arm whose cost is a lower bound is
        drawn hollow.
    """
    arms = sweep_arms(logs, scorer=scorer, key=key)
    figure = _figure(8, 5)
    ax = figure.subplots()
    for i, arm in enumerate(arms):
        colour = f"C{i % 10}"
        ax.scatter(arm.costs, arm.scores, color=colour, alpha=0.25, s=14)
        ax.errorbar(
            arm.cost, arm.score, xerr=arm.cost_spread, yerr=arm.score_spread, fmt="o",
            color=colour, markerfacecolor=colour if arm.complete else "white", capsize=4,
            label=f"{arm.label} (n={len(arm.scores)})",
        )  # fmt: skip
    ax.set_xlabel("realized cost per sample ($)")
    ax.set_ylabel("score")
    ax.set_title("Score against realized cost, per arm")
    ax.legend(fontsize=8)
    return figure
