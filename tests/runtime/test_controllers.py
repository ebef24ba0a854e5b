import re
from collections.abc import Sequence
from contextlib import aclosing
from pathlib import Path

import pytest
from inspect_ai.agent import react
from stop_on_proof import checked_solver, until_proved

from inspect_swarm import (
    Controller,
    MemberInfo,
    StopReason,
    SwarmControl,
    member,
    swarm,
    swarm_controller,
)

from .helpers import infos, result, run, statuses
from .spec_controllers import escalate, prefer

SLOW = [{"text": "still working", "delay": 0.2}]


def ledger_of(sample: object) -> dict[str, object]:
    [data] = infos(sample, "ledger")  # type: ignore[arg-type]
    ledger: dict[str, object] = data["ledger"]
    return ledger


def test_escalate_starts_the_others_only_after_the_first_fails(
    backend: str, tmp_path: Path
) -> None:
    sample = run(
        swarm(
            [member(react, name="fast"), member(react, name="slow", count=2)],
            controller=escalate("fast"),
            channels=[],
        ),
        {
            "fast": [{"text": "no", "stop_reason": "model_length"}],
            "slow-1": [{"submit": "42"}],
            "slow-2": SLOW * 20,
        },
        tmp_path,
    )
    assert statuses(sample) == {"fast": "unsubmitted", "slow-1": "submitted", "slow-2": "stopped"}
    assert result(sample)["final"]["member"] == "slow-1"


def test_escalate_leaves_the_others_pending_when_the_first_submits(tmp_path: Path) -> None:
    sample = run(
        swarm(
            [member(react, name="fast"), member(react, name="slow")],
            controller=escalate("fast"),
            channels=[],
        ),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    record = result(sample)
    assert [(m["name"], m["state"], m["status"]) for m in record["members"]] == [
        ("fast", "ended", "submitted"),
        ("slow", "pending", None),
    ]
    assert sample.store["inspect_swarm:ledger"]["members"][1]["status"] is None


def test_a_controller_check_refuses_at_swarm_time() -> None:
    with pytest.raises(ValueError, match="no member is named 'fast'"):
        swarm(member(react, count=2), controller=escalate("fast"), channels=[])


def test_prefer_chooses_the_answer(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(
            [member(react, name="a", role="draft"), member(react, name="b", role="final")],
            controller=prefer("final"),
            channels=[],
        ),
        {"a": [{"submit": "41"}], "b": [{"text": "x", "delay": 0.1}, {"submit": "42"}]},
        tmp_path,
    )
    assert result(sample)["final"] == {
        "mode": "controller",
        "member": "b",
        "reason": "first final to submit",
        "provisional": False,
    }
    assert sample.output.completion == "42"
    assert ledger_of(sample)["stop_reason"] == "all_done"
    # the final event gives the mode, the member and the controller's reason
    [final] = [d for d in infos(sample, "result") if d["kind"] == "final"]
    assert final == {"type": "result", "kind": "final", **result(sample)["final"]}
    assert sample.messages[-1].metadata == {
        "inspect_swarm": {"final": {"mode": "controller", "member": "b"}}
    }


def test_until_proved_with_checked_solver(backend: str, tmp_path: Path) -> None:
    sample = run(
        swarm(member(checked_solver, count=2), controller=until_proved(), channels=[]),
        {
            # a wrong submission is checked and refused, then the right one passes
            "checked_solver-1": [{"submit": "41"}, {"submit": "42"}],
            # never passes: its last submission is not checked, so it is no proof
            "checked_solver-2": [
                {"submit": "40"},
                {"submit": "40"},
                {"submit": "40"},
                {"submit": "40"},
                {"submit": "40"},
            ],
        },
        tmp_path,
    )
    assert ledger_of(sample)["stop_reason"] == "controller:proved"
    members = {m["name"]: m for m in result(sample)["members"]}
    assert members["checked_solver-1"]["status"] == "submitted"
    assert members["checked_solver-1"]["gate_checks"] == 2
    assert members["checked_solver-1"]["gate_passes"] == 1
    assert members["checked_solver-1"]["first_pass_time"] is not None
    assert members["checked_solver-2"]["status"] in ("member_limit:custom", "stopped")


def test_checked_solver_without_a_pass_ends_member_limit_custom(tmp_path: Path) -> None:
    sample = run(
        swarm(member(checked_solver, {"attempts": 2}), controller=until_proved(), channels=[]),
        {"*": [{"submit": "1"}, {"submit": "2"}]},
        tmp_path,
    )
    assert statuses(sample) == {"checked_solver": "member_limit:custom"}
    assert ledger_of(sample)["stop_reason"] == "all_done"
    assert result(sample)["final"]["reason"] == "no_submissions"


@swarm_controller
def misuse(what: str) -> Controller:
    async def run(swarm: SwarmControl) -> StopReason:
        first = swarm.members[0]
        swarm.start(first)
        if what == "start_twice":
            swarm.start(first)
        if what == "choose_unsubmitted":
            swarm.choose_answer(first)
        if what == "two_iterators":
            one = swarm.events()
            await one.__anext__()
            async with aclosing(swarm.events()) as two:
                async for _ in two:
                    pass
        return "done"

    return Controller(run)


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("start_twice", "has already started; a member runs once"),
        ("choose_unsubmitted", "has not ended with a submission"),
        ("two_iterators", "another events\\(\\) iterator is open"),
    ],
)
def test_controller_misuse_is_an_error(what: str, message: str, tmp_path: Path) -> None:
    from .helpers import run_log

    log = run_log(
        swarm(member(react, count=2), controller=misuse(what), channels=[]),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    assert log.samples and log.samples[0].error is not None
    assert re.search(message, log.samples[0].error.message)


@swarm_controller
def late_start() -> Controller:
    async def run(swarm: SwarmControl) -> StopReason:
        swarm.start(swarm.members[0])
        async with aclosing(swarm.events()) as events:
            async for _ in events:
                pass
        return "first_done"

    return Controller(run)


def test_other_stop_reasons_are_recorded_as_controller_reasons(tmp_path: Path) -> None:
    sample = run(
        swarm(member(react, count=2), controller=late_start(), channels=[]),
        {"*": [{"submit": "42"}]},
        tmp_path,
    )
    assert ledger_of(sample)["stop_reason"] == "controller:first_done"
    assert [m["state"] for m in result(sample)["members"]] == ["ended", "pending"]


def test_controller_factory_is_registered_and_logged() -> None:
    from inspect_ai._util.registry import registry_info, registry_params

    ctrl = escalate("fast")
    assert registry_info(ctrl).type == "swarm_controller"
    assert registry_info(ctrl).name.endswith("escalate")
    assert registry_params(ctrl) == {"first": "fast"}


def test_controller_by_name_uses_defaults() -> None:
    solver = swarm(member(react, name="fast"), controller="leaderless", channels=[])
    assert solver is not None


def test_check_receives_member_info() -> None:
    seen: list[Sequence[MemberInfo]] = []

    @swarm_controller
    def spy() -> Controller:
        async def run(swarm: SwarmControl) -> StopReason:
            return "all_done"

        return Controller(run, check=seen.append)

    swarm(
        [member(react, name="a", role="lead"), member(react, name="b")],
        controller=spy(),
        channels=[],
    )
    assert list(seen[0]) == [MemberInfo("a", "lead"), MemberInfo("b", None)]
