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
    """Tokens of the recorded calls. Calls made with token metering suspended (those of
    approval and review) are left out here."""

    cost: float = 0.0
    """Cost in dollars of the priced calls recorded, suspended calls included."""

    suspended_cost: float = 0.0
    """The part of `cost` recorded while token metering was suspended (approval and review
    calls)."""


class Calls(BaseModel):
    """Counts of the model events in the swarm, or in one member's spans.

    The calls counted in `errored`, `no_usage` and `unpriced` have no known cost: when any of
    the three is above zero, the recorded cost is only a lower bound.
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
    """The member's agent was cancelled; or its agent had returned and the swarm's hard stop then
    cancelled the drain of its background work. That second case leaves the agent's status as
    it was, so a member can be `cancelled` with `status="submitted"`."""

    background_started: int
    """Tasks the member's agent started with `background()`, such as `deepagent()` background
    subagents, and any its factory started (which makes the member `errored`)."""

    background_cancelled: int
    """Of `background_started`, the tasks that were cancelled: still running when the member's
    drain ended, cancelled by an error from the member's work or by the hard stop, or started
    by its factory (the swarm cancels those before they run)."""


class SwarmLedger(BaseModel):
    """What one run of the swarm used and spent, and how far those figures are complete.

    When the swarm ends it writes the ledger, once, into the sample store under
    `inspect_swarm:ledger` and as an `InfoEvent` whose source is `inspect_swarm`.
    `swarm_ledger()` reads it back from a sample.

    The store entry's shape follows `version`. This inspect_swarm reads version 1 only.
    """

    model_config = ConfigDict(use_attribute_docstrings=True)

    version: Literal[1] = 1
    """Format version of the ledger."""

    budget: Budget
    """The swarm's budget as configured."""

    caps: dict[str, float | None]
    """The caps the swarm applied, given or derived, under the keys `cost` (in dollars),
    `tokens` and `time` (in seconds); an uncapped kind maps to `None`."""

    sample_limits: dict[str, float | None]
    """The sample's limits as they stood at the swarm's start, under the keys `token`, `cost`,
    `message`, `turn`, `working` and `time`; an unset limit maps to `None`."""

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
    """Usage of the sample during the swarm's lifetime that the swarm meter missed: for tokens,
    `sample_delta` less `swarm.usage`; for `total_cost`, the cost of `sample_delta` less
    `swarm.cost`."""

    unpriced_models: list[str]
    """Models in `sample_delta` with tokens but no cost."""

    native_compaction_classes: list[str]
    """The `ModelAPI` classes, loaded at the swarm's start or end, that override `compact()`.
    Compaction done natively logs no event, so the ledger has no count of those calls."""

    overshoot: dict[str, float]
    """By how much the final usage passed each cap it passed, under `cost`, `tokens` or `time`;
    kinds that stayed within their cap are absent."""

    stop_reason: str | None
    """Why the swarm stopped its members, taken from the first stop that began; `None` if none
    began."""

    ended_by: str | None
    """What ended the swarm from outside, even in the midst of its own stop: a sample limit
    (`sample_limit:<type>`) or an operator's interrupt (`operator`). `unknown` when some outside
    cause may have ended it and cannot be named; `None` when nothing outside did."""

    interrupted: bool
    """The swarm did not finish: an error, a limit or a cancellation cut it short, at its final
    step or earlier."""

    final_cancelled: bool
    """The final step was cancelled."""

    resumed: bool
    """The sample resumed from a checkpoint, so the swarm restarted its caps from zero."""

    total_complete: bool
    """No call is known to be missing from the swarm's usage and cost. That takes all of these:
    nothing cancelled (no member, member background task or final step), no interruption,
    priced usage for every call, a price for every model in `sample_delta`, and no loaded model
    class that compacts natively."""

    attribution_complete: bool
    """`total_complete`, and the swarm meter recorded all the sample used over the swarm's
    lifetime: `unattributed` is zero, to within rounding."""
