"""Columns for `samples_df()` and the models of the swarm ledger.

`SwarmColumns` adds each sample's realized cost and ledger data to Inspect's `samples_df()`, as in
`samples_df(logs, columns=SampleSummary + SwarmColumns)`. `samples_df()` needs pandas and pyarrow
(`pip install "pandas>=2.1.0" "pyarrow>=10.0.1"`). The columns:

- `swarm_cost`: the sample's priced cost in dollars, from its `model_usage`, including scorer
  calls. Tokens are in `SampleSummary`'s `total_tokens`.
- `swarm_complete`: no call is known to be missing from `swarm_cost`. The ledger marks the swarm's
  interval complete, and every model in the sample's `model_usage` is priced. Calls outside the
  swarm, including scorer calls, are not checked. `False` for a sample with no ledger.
- `swarm_members`: members in the roster.
- `swarm_resumed`: the sample resumed from a checkpoint, so the swarm restarted its caps from zero.
  `False` for a sample with no ledger.
- `swarm_cost_cap`, `swarm_token_cap`, `swarm_time_cap`: the swarm's caps. The time cap is in
  seconds.
- `swarm_errored`, `swarm_no_usage`, `swarm_unpriced`: model calls in the swarm that errored or
  were cancelled (retries included), that completed with no usage, and whose usage has no cost.
  Each makes the cost a lower bound.
- `swarm_unpriced_models`: models with tokens and no cost, from the ledger and the sample's
  `model_usage`, as a JSON list.

The columns read from the ledger are null for a sample with no ledger. A sample that runs two
swarms keeps only the last one's ledger, while its `model_usage` covers both. The columns read the
sample's `store` and `model_usage`, so do not exclude either with `samples_df(exclude_fields=...)`.

`swarm_ledger()` reads a sample's whole ledger as a `SwarmLedger`, whose `members` are
`MemberLedger`s with a `Meter` and `Calls` each. `SwarmLedger.model_json_schema()` describes every
field.

`SwarmOutcomeColumns` adds how each swarm ended, from its records (null without a swarm):

- `swarm_stop_reason`, `swarm_ended_by`: the ledger's `stop_reason` and `ended_by`.
- `swarm_answer_member`, `swarm_answer_mode`: the member whose submission is the answer, and
  the rule that chose it (`first`, `last`, `controller`); null with no submission.
- `swarm_steps_to_answer`: the answering member's completed model calls.
- `swarm_members_submitted`, `swarm_members_never_acted`: members that ended with a
  submission, and members that finished no model call.
- `swarm_wall_clock`: seconds from the swarm's start to its end.

`members_df()` reads one row per member of each swarm, per sample and epoch, with its own
score from `member_scores()`. `swarm_timeline()`, `comm_reads()` and `sweep_arms()` give the
data that `plot_timeline()`, `plot_comm()` and `plot_sweep()` draw (with the `viz` extra).
"""

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
