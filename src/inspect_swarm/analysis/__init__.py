"""Columns for `samples_df()` and the models of the swarm ledger.

`SwarmColumns` adds each sample's realized cost and ledger data to Inspect's `samples_df()`, as in
`samples_df(logs, columns=SampleSummary + SwarmColumns)`. `samples_df()` needs pandas and pyarrow
(`pip install "pandas>=2.1.0" "pyarrow>=10.0.1"`). The columns:

- `swarm_cost`: the sample's priced cost in dollars, from its `model_usage`, including scorer
  calls. Tokens are in `SampleSummary`'s `total_tokens`.
- `swarm_complete`: true when `swarm_cost` lacks no call anyone knows of, that is, when the
  ledger calls the swarm's totals complete and each model in the sample's `model_usage` has a
  price. Calls made outside the swarm, a scorer's among them, go unchecked. `False` without a
  ledger.
- `swarm_members`: the roster's size.
- `swarm_resumed`: true for a sample resumed from a checkpoint, whose caps the swarm counted
  afresh from zero. `False` without a ledger.
- `swarm_cost_cap`, `swarm_token_cap`, `swarm_time_cap`: the swarm's caps, time in seconds.
- `swarm_errored`, `swarm_no_usage`, `swarm_unpriced`: the swarm's model calls that failed or
  were cancelled (retries counted), that finished without usage, and whose usage had no price.
  Any of them above zero leaves the cost a lower bound.
- `swarm_unpriced_models`: a JSON list of the models with tokens but no price, from the ledger
  and the sample's `model_usage`.

A sample without a ledger has nulls in the columns that come from the ledger. Where a sample
ran two swarms, only the later one's ledger is kept, though its `model_usage` covers both. The
columns read the sample's `store` and `model_usage`, so do not exclude either with
`samples_df(exclude_fields=...)`.

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

import lazy_loader

# Each public name is imported on first use, from the imports of `__init__.pyi`, so that
# `inspect-swarm show` reads logs without importing the dataframe machinery.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
