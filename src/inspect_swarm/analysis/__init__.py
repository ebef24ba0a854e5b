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
ran two swarms, only the later one's ledger is kept, though its `model_usage` covers both. The columns read the
sample's `store` and `model_usage`, so do not exclude either with `samples_df(exclude_fields=...)`.

`swarm_ledger()` reads a sample's whole ledger as a `SwarmLedger`, whose `members` are
`MemberLedger`s with a `Meter` and `Calls` each. `SwarmLedger.model_json_schema()` describes every
field.
"""

from .._contracts._schema import Calls, MemberLedger, Meter, SwarmLedger
from ._columns import SwarmColumns, swarm_ledger

__all__ = ["Calls", "MemberLedger", "Meter", "SwarmColumns", "SwarmLedger", "swarm_ledger"]
