"""Activation policies: members activated turn by turn (round_robin, superstep, policies of
one's own), conversational members, routes, exposure evidence and interventions."""

from pathlib import Path
from typing import Any

from inspect_swarm import member, round_robin, shared_memory, swarm, swarm_react

from .helpers import infos, run, statuses, stop_reason


def append(text: str) -> dict[str, Any]:
    arguments = {"command": "append", "path": "/shared_memory/log", "append_text": text}
    return {"tool": "shared_memory", "arguments": arguments}


def test_round_robin_runs_one_step_of_each_member_per_round(backend: str, tmp_path: Path) -> None:
    names = ("a", "b", "c")
    sample = run(
        swarm(
            [member(swarm_react, name=n) for n in names],
            controller=round_robin(max_rounds=2),
            channels=[shared_memory()],
        ),
        {n: [append(f"{n}1"), append(f"{n}2"), append(f"{n}3")] for n in names},
        tmp_path,
    )
    sent = [e["payload"] for e in infos(sample, "comm") if e["kind"] == "sent"]
    assert sent == ["a1", "b1", "c1", "a2", "b2", "c2"]
    assert stop_reason(sample) == "policy:max_rounds"
    assert statuses(sample) == {"a": "stopped", "b": "stopped", "c": "stopped"}
