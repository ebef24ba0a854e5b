"""Columns for `samples_df()` and the models of the swarm ledger."""

# The public API, for type checkers and IDEs; `__init__.py` imports each name on first use.
from ._columns import SwarmColumns, SwarmOutcomeColumns, swarm_ledger
from ._members import members_df
from ._models import Calls, MemberLedger, Meter, SwarmLedger
from ._plots import plot_comm, plot_sweep, plot_timeline
from ._views import (
    SwarmTimeline,
    SweepArm,
    TimelineMark,
    TimelineSpan,
    comm_reads,
    swarm_timeline,
    sweep_arms,
)

__all__ = [
    "Calls",
    "MemberLedger",
    "Meter",
    "SwarmColumns",
    "SwarmLedger",
    "SwarmOutcomeColumns",
    "SwarmTimeline",
    "SweepArm",
    "TimelineMark",
    "TimelineSpan",
    "comm_reads",
    "members_df",
    "plot_comm",
    "plot_sweep",
    "plot_timeline",
    "swarm_ledger",
    "swarm_timeline",
    "sweep_arms",
]
