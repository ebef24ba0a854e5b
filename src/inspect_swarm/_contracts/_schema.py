"""What the swarm writes to the sample: the store keys and event source of its records, and
the ledger's models.

The result and metrics records are plain JSON; their fields are described in the records
docs. The ledger is a pydantic model, read back with `swarm_ledger()`.
"""

from typing import Literal

from inspect_ai.model import ModelUsage
from pydantic import BaseModel, ConfigDict, Field

from ._budget import Budget

RESULT_KEY = "inspect_swarm:result"
"""The sample store key of the result record."""

LEDGER_KEY = "inspect_swarm:ledger"
"""The sample store key of the ledger."""

METRICS_KEY = "inspect_swarm:metrics"
"""The sample store key of the metrics record."""

SUBMISSIONS_KEY = "inspect_swarm:submissions"
"""The sample store key of each submitting member's output, written once, when the swarm ends."""

EVIDENCE_SOURCE = "inspect_swarm"
"""The `source` of every InfoEvent whose data is a record or evidence (a dict with a `type`),
and the metadata key of the swarm's messages."""

SUMMARY_SOURCE = "inspect_swarm:summary"
"""The `source` of the InfoEvent with the swarm's summary, in Markdown, when it ends."""

ENDED_SOURCE = "inspect_swarm:ended"
"""The `source` of the InfoEvent that ends each member's timeline: how it ended, in words."""


class Meter(BaseModel):
    """Usage and cost recorded by one of the swarm's meters.

    A meter counts the model calls made in its context: one member's, the runtime's, the final
    step's, or the whole swarm's.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    usage: ModelUsage = Field(default_factory=ModelUsage)
    """Token usage of the calls recorded, except those made while token metering was suspended
    (approval and review calls)."""

    cost: float = 0.0
    """Cost in dollars of the priced calls recorded, suspended calls included."""

    suspended_cost: float = 0.0
    """The part of `cost` recorded while token metering was suspended (approval and review
    calls)."""


class Calls(BaseModel):
    """Counts of the model events in the swarm, or in one member's spans.

    `errored`, `no_usage` and `unpriced` count calls whose cost is missing, so any of them above
    zero makes the cost a lower bound.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    calls: int = 0
    """Model calls that completed, cache replays excluded."""

    cache_replays: int = 0
    """Model events replayed from the cache (`cache="read"`). They cost nothing."""

    errored: int = 0
    """Model calls that ended in an error or were cancelled, plus the requests a provider's
    client retried inside one call. Their usage is unknown."""

    no_usage: int = 0
    """Model calls that completed with output but no usage."""

    unpriced: int = 0
    """Model calls that completed with usage but no cost (`total_cost` is `None`)."""


class MemberLedger(BaseModel):
    """One member's entry in the swarm's ledger."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """The member's name."""

    status: str | None
    """How the member ended (`submitted`, `swarm_cap`, ...), or `None` for a member never
    started."""

    bridged: bool
    """The member runs a CLI agent through Inspect's agent bridge."""

    meter: Meter
    """Usage and cost of the calls made in the member's context."""

    calls: Calls
    """Model events in the member's spans."""

    cancelled: bool
    """The member's agent was cancelled, or the swarm's hard stop cancelled its background drain
    after the agent had returned. A hard stop during the drain keeps the agent's status, so
    `cancelled` can be `True` with `status="submitted"`."""

    background_started: int
    """Tasks the member's agent started with `background()`, such as `deepagent()` background
    subagents, and any its factory started (which makes the member `errored`)."""

    background_cancelled: int
    """Of `background_started`, the tasks that were cancelled: still running when the member's
    drain ended, cancelled by an error from the member's work or by the hard stop, or started
    by its factory (the swarm cancels those before they run)."""


class SwarmLedger(BaseModel):
    """Realized usage and cost of one run of the swarm, and how complete they are.

    The swarm writes its ledger once, when it ends, to the sample store as `inspect_swarm:ledger`
    and as an `InfoEvent` with source `inspect_swarm`. Read it from a sample with
    `swarm_ledger()`.

    The store entry's shape follows `version`. This inspect_swarm reads version 1 only.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    version: Literal[1] = 1
    """Format version of the ledger."""

    budget: Budget
    """The swarm's budget as configured."""

    caps: dict[str, float | None]
    """The swarm's caps, derived or explicit, keyed by `cost` (dollars), `tokens` and `time`
    (seconds). `None` for a kind with no cap."""

    sample_limits: dict[str, float | None]
    """The sample's limits when the swarm started, keyed by `token`, `cost`, `message`, `turn`,
    `working` and `time`. `None` for a limit not set."""

    members: list[MemberLedger]
    """Each member, in roster order."""

    runtime: Meter
    """Calls made by the swarm's runtime, such as the controller's."""

    final: Meter
    """Calls made by the final step, which chooses the answer."""

    swarm: Meter
    """Every call in the swarm's context: the members, the runtime, the final step and anything
    else."""

    calls: Calls
    """Model events in the swarm's span tree: the members, the runtime and the final step."""

    unpriced_calls_recorded: int
    """Calls the swarm meter recorded with usage but no cost."""

    sample_delta: ModelUsage
    """The sample's model usage over the swarm's lifetime, summed over its models."""

    unattributed: ModelUsage
    """What the sample used over the swarm's lifetime that the swarm meter did not record: tokens
    are `sample_delta` minus `swarm.usage`, and `total_cost` is `sample_delta`'s cost minus
    `swarm.cost`."""

    unpriced_models: list[str]
    """Models in `sample_delta` with tokens but no cost."""

    native_compaction_classes: list[str]
    """Loaded `ModelAPI` classes that override `compact()`, when the swarm started or ended.
    Native compaction emits no event, so the ledger cannot count its calls."""

    overshoot: dict[str, float]
    """How far usage at the end went past each cap, keyed by `cost`, `tokens` and `time`. Only
    kinds over their cap appear."""

    stop_reason: str | None
    """The reason the swarm stopped its members, from the first stop begun. `None` when no stop
    began."""

    ended_by: str | None
    """The sample limit (`sample_limit:<type>`) or operator interrupt (`operator`) that ended the
    swarm, even during its own stop. `unknown` when an outside cause may have ended it but cannot
    be named. `None` when nothing from outside ended it."""

    interrupted: bool
    """The swarm did not finish: an error, a limit or a cancellation ended it before or during its
    final step."""

    final_cancelled: bool
    """The final step was cancelled."""

    resumed: bool
    """The sample resumed from a checkpoint, so the swarm restarted its caps from zero."""

    total_complete: bool
    """No call is known to be missing from the swarm's usage and cost: no member, member
    background task or final step was cancelled, the swarm was not interrupted, every call
    completed with priced usage, every model in `sample_delta` is priced, and no loaded model
    class compacts natively."""

    attribution_complete: bool
    """`total_complete`, and the swarm meter recorded all the sample used over the swarm's
    lifetime: `unattributed` is zero, to within rounding."""
