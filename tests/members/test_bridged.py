from pathlib import Path
from typing import Any

import pytest
from inspect_ai.agent import react
from inspect_ai.event import SampleLimitEvent
from inspect_ai.log import EvalSample
from inspect_ai.util import cost_limit, message_limit, time_limit, token_limit, turn_limit
from inspect_swe import claude_code

from inspect_swarm import (
    Budget,
    Channel,
    member,
    messages,
    notes,
    shared_memory,
    swarm,
    swarm_channel,
    tasks,
)
from inspect_swarm._contracts._member import resolve_roster

from ..runtime.helpers import ALL_RUN, ledger_member, metrics_member, run, statuses
from .agents import background_then_bridge, bridged_with_background, cli_agent

FAST = [{"text": "ok", "delay": 0.01}] * 40
# each scripted call: 100 input + 10 output tokens, $0.002


def assert_sample_went_on(sample: EvalSample) -> None:
    assert sample.error is None and sample.limit is None
    # the bridged member's limits are metered, never Inspect limits that would end the sample
    assert not [e for e in sample.events if isinstance(e, SampleLimitEvent)]


def test_inspect_swe_agents_count_as_bridged() -> None:
    roster = resolve_roster(
        [
            member(claude_code, name="swe"),
            member(cli_agent, name="undeclared"),
            member(cli_agent, name="declared", bridged=True),
            member(claude_code, name="not_swe", bridged=False),
        ]
    )
    assert [(m.name, m.bridged, m.delivery) for m in roster] == [
        ("swe", True, "poll"),
        ("undeclared", False, "notify"),
        ("declared", True, "poll"),
        ("not_swe", False, "notify"),
    ]


class NativeOnly(Channel):
    """A channel with records that does not say it serves bridged members."""

    name = "native_only"
    prefix = "z"


@swarm_channel
def native_only() -> Channel:
    return NativeOnly()


def test_bridged_members_are_refused_only_beside_channels_that_cannot_serve_them() -> None:
    with pytest.raises(
        ValueError,
        match=r"bridged members \['claude_code'\] cannot use the channels \['native_only'\], "
        r"whose tools serve native members only \(their Channel.bridged is False\)",
    ):
        swarm([member(claude_code), member(react)], channels=[shared_memory(), native_only()])
    # the built-in channels with tools serve them, through swarm_bridged_tools()
    swarm(
        [member(claude_code), member(react)],
        channels=[shared_memory(), messages(), tasks(), notes()],
    )


def test_a_cap_cancels_the_bridged_member_without_ending_the_sample(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            [member(cli_agent, name="cli", bridged=True), member(react, name="native")],
            controller=ALL_RUN,
            channels=[],
            budget=Budget(tokens=600),
        ),
        {"cli": FAST, "native": [{"text": "thinking", "after": "stop"}] * 5},
        tmp_path,
    )
    assert_sample_went_on(sample)
    # the native member's call, held until the stop, finished past the cap, so it reached it too
    assert statuses(sample) == {"cli": "swarm_cap", "native": "swarm_cap"}
    assert not ledger_member(sample, "native")["cancelled"]
    cli = ledger_member(sample, "cli")
    assert cli["bridged"] and cli["cancelled"]
    # cancelled at once: no call after the one that reached the cap
    assert cli["calls"]["calls"] == 6
    assert sample.store["inspect_swarm:ledger"]["stop_reason"] == "swarm_cap"


@pytest.mark.parametrize(
    ("limit", "steps", "status", "calls"),
    [
        (token_limit(250), FAST, "member_limit:token", 3),
        (cost_limit(0.005), FAST, "member_limit:cost", 3),
        (turn_limit(2), FAST, "member_limit:turn", 2),
        (message_limit(4), FAST, "member_limit:message", 2),
        (time_limit(0.5), [{"text": "slow", "delay": 0.2}] * 10, "member_limit:time", None),
    ],
)
def test_a_bridged_members_own_limit_cancels_it(
    backend: str, tmp_path: Path, limit: Any, steps: list[Any], status: str, calls: int | None
) -> None:
    sample = run(
        swarm(
            [
                member(cli_agent, name="cli", bridged=True, limits=[limit]),
                member(react, name="native"),
            ],
            controller=ALL_RUN,
            channels=[],
        ),
        {"cli": steps, "native": [{"text": "x", "delay": 0.3}, {"submit": "42"}]},
        tmp_path,
    )
    assert_sample_went_on(sample)
    assert statuses(sample) == {"cli": status, "native": "submitted"}
    cli = ledger_member(sample, "cli")
    assert cli["cancelled"]
    if calls is not None:
        assert cli["calls"]["calls"] == calls


def test_a_bridged_member_ends_at_once_on_its_share(tmp_path: Path) -> None:
    sample = run(
        swarm(
            [member(cli_agent, name="cli", bridged=True), member(react, name="native")],
            controller=ALL_RUN,
            channels=[],
            budget=Budget(tokens=1000, split="equal"),
        ),
        {"cli": FAST, "native": [{"text": "x", "delay": 0.3}, {"submit": "42"}]},
        tmp_path,
    )
    assert_sample_went_on(sample)
    assert statuses(sample) == {"cli": "share", "native": "submitted"}
    cli = ledger_member(sample, "cli")
    assert cli["cancelled"] and cli["calls"]["calls"] == 5


def test_a_stopped_bridged_member_is_cancelled_at_its_next_call(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm([member(cli_agent, name="cli", bridged=True), member(react, name="native")]),
        {"cli": [{"text": "slow", "delay": 0.3}] * 10, "native": [{"submit": "42"}]},
        tmp_path,
    )
    assert_sample_went_on(sample)
    assert statuses(sample) == {"cli": "stopped", "native": "submitted"}
    cli = ledger_member(sample, "cli")
    # its call in flight finished within the grace period; the next one was cancelled
    assert cli["cancelled"] and cli["calls"]["calls"] == 1
    metrics = metrics_member(sample, "cli")
    assert metrics["delivery_effective"] == "poll"
    assert metrics["longest_identical_tool_run"] is None


def test_a_bridged_member_that_submits(tmp_path: Path) -> None:
    sample = run(
        swarm(member(cli_agent, {"calls": 2}, name="cli", bridged=True), channels=[]),
        {"cli": [{"text": "thinking"}, {"text": "42"}]},
        tmp_path,
    )
    assert statuses(sample) == {"cli": "submitted"}
    assert sample.output.completion == "42"
    assert not ledger_member(sample, "cli")["cancelled"]


def test_background_raises_in_a_bridged_member(tmp_path: Path) -> None:
    sample = run(
        swarm(member(bridged_with_background, name="cli", bridged=True), channels=[]),
        {"*": FAST},
        tmp_path,
    )
    assert statuses(sample) == {"cli": "errored"}
    assert sample.error is not None
    assert "member cli is bridged" in sample.error.message
    assert "cannot have background work" in sample.error.message


def test_bridge_use_after_background_work_ends_the_member_errored(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(member(background_then_bridge, name="w"), channels=[]), {"*": FAST}, tmp_path
    )
    assert statuses(sample) == {"w": "errored"}
    assert sample.error is not None
    assert "used the agent bridge after starting background work" in sample.error.message
    w = ledger_member(sample, "w")
    assert w["cancelled"] and w["background_started"] == 1 and w["background_cancelled"] == 1
    # cancelled before its bridged call went out
    assert w["calls"]["calls"] == 0
