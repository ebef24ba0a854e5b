from typing import Any

import pytest

from inspect_swarm.analysis import Calls, MemberLedger, Meter, SwarmLedger, swarm_ledger

OURS = {"SwarmLedger", "MemberLedger", "Meter", "Calls", "Budget"}


def test_schema_describes_every_field() -> None:
    schema = SwarmLedger.model_json_schema()
    models: dict[str, Any] = {"SwarmLedger": schema, **schema["$defs"]}
    assert set(models) >= OURS
    for name in OURS:
        for field, spec in models[name]["properties"].items():
            assert spec.get("description"), f"{name}.{field} has no description"
    assert list(SwarmLedger.model_fields) == [
        "version", "budget", "caps", "sample_limits", "members", "runtime", "final", "swarm",
        "calls", "unpriced_calls_recorded", "sample_delta", "unattributed", "unpriced_models",
        "native_compaction_classes", "overshoot", "stop_reason", "ended_by", "interrupted",
        "final_cancelled", "resumed", "total_complete", "attribution_complete",
    ]  # fmt: skip
    assert list(MemberLedger.model_fields) == [
        "name", "status", "bridged", "meter", "calls", "cancelled", "background_started",
        "background_cancelled",
    ]  # fmt: skip
    assert list(Meter.model_fields) == ["usage", "cost", "suspended_cost"]
    assert list(Calls.model_fields) == ["calls", "cache_replays", "errored", "no_usage", "unpriced"]


class _Sample:
    id = 1

    def __init__(self, store: dict[str, Any]) -> None:
        self.store = store


def test_swarm_ledger_reads_version_1_only() -> None:
    assert swarm_ledger(_Sample({})) is None  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version=2"):
        swarm_ledger(_Sample({"inspect_swarm:ledger": {"version": 2}}))  # type: ignore[arg-type]
