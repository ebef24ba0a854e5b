from pathlib import Path

from inspect_ai import Task, eval
from inspect_ai._eval.loader import solver_from_spec
from inspect_ai.agent import react
from inspect_ai.event import ModelEvent
from inspect_ai.solver import SolverSpec

from inspect_swarm import Budget, leaderless, member, swarm
from inspect_swarm.scripted import scripted_model

from .helpers import ROOT, cli_eval, infos, result, task


def test_cli_solver_form(tmp_path: Path) -> None:
    log = cli_eval(
        ROOT / "examples/getting_started.yaml",
        tmp_path,
        "members={factory: react, count: 4}",
        "channels=[]",
        "budget={time: 600, split: equal}",
    )
    assert log.eval.solver == "inspect_swarm/swarm"
    assert log.samples
    record = result(log.samples[0])
    assert [m["name"] for m in record["members"]] == [f"react-{i}" for i in range(1, 5)]
    assert record["final"]["member"] == "react-2"
    assert log.samples[0].store["inspect_swarm:ledger"]["budget"]["split"] == "equal"


BOARD_SCRIPT = """
members:
  swarm_react-1:
    - {tool: shared_memory, arguments: {command: append, path: /shared_memory/log, append_text: "swarm_react-1 was here"}}
    - {text: "Waiting for the others.", delay: 2.0}
    - {submit: "42"}
  "*":
    - {tool: swarm_wait, arguments: {path: /shared_memory/log}}
    - {tool: shared_memory, arguments: {command: view, path: /shared_memory/log}}
    - {submit: "42"}
"""


def test_cli_swarm_react_gives_every_member_the_board(tmp_path: Path) -> None:
    (tmp_path / "board.yaml").write_text(BOARD_SCRIPT)
    log = cli_eval(
        tmp_path / "board.yaml",
        tmp_path / "logs",
        "members={factory: swarm_react, count: 3}",
        "channels=shared_memory",
    )
    assert log.samples
    sample = log.samples[0]
    names = [f"swarm_react-{i}" for i in range(1, 4)]
    assert [m["name"] for m in result(sample)["members"]] == names
    # every member was offered the board, wrote or read it, and none misses its wiring
    offered = {
        e.span_id: {t.name for t in e.tools} for e in sample.events if isinstance(e, ModelEvent)
    }
    assert offered and all({"shared_memory", "swarm_wait"} <= tools for tools in offered.values())
    assert {d["member"] for d in infos(sample, "comm") if d["kind"] in ("sent", "read")} == set(
        names
    )
    assert infos(sample, "wiring") == []
    metrics = sample.store["inspect_swarm:metrics"]
    assert (metrics["notify_unwired"], metrics["tools_unwired"]) == ([], [])
    # the builder is logged by name, as given, and the swarm rebuilds from the log
    assert log.eval.solver_args is not None
    assert log.eval.solver_args["members"] == {"factory": "swarm_react", "count": 3}
    rebuilt = solver_from_spec(
        SolverSpec(log.eval.solver or "", log.eval.solver_args, log.eval.solver_args_passed or {})
    )
    [again] = eval(
        task(rebuilt),
        model=scripted_model(tmp_path / "board.yaml", name="demo"),
        log_dir=str(tmp_path / "again"),
        display="none",
    )
    assert again.samples
    assert [d["member"] for d in infos(again.samples[0], "comm") if d["kind"] == "sent"] == [
        "swarm_react-1"
    ]


def test_the_log_rebuilds_the_swarm(tmp_path: Path) -> None:
    solver = swarm(
        member(react, {"prompt": "Be brief."}, name="w", count=2),
        controller=leaderless(stop_on_submission=False),
        channels=[],
        budget=Budget(grace=5.0, split="equal"),
    )
    [log] = eval(
        task(None),
        solver=solver,
        model=scripted_model({"members": {"*": [{"submit": "42"}]}}),
        log_dir=str(tmp_path / "first"),
        display="none",
    )
    logged = log.eval
    assert logged.solver_args is not None
    assert logged.solver_args["members"] == {
        "factory": "inspect_ai/react",
        "args": {"prompt": "Be brief."},
        "name": "w",
        "count": 2,
    }
    assert logged.solver_args["controller"]["params"] == {
        "stop_on_submission": False,
        "final": None,
        "stop": None,
    }
    rebuilt = solver_from_spec(
        SolverSpec(logged.solver or "", logged.solver_args, logged.solver_args_passed or {})
    )
    [again] = eval(
        task(rebuilt),
        model=scripted_model({"members": {"*": [{"submit": "42"}]}}),
        log_dir=str(tmp_path / "again"),
        display="none",
    )
    assert again.samples
    record = result(again.samples[0])
    assert [m["status"] for m in record["members"]] == ["submitted", "submitted"]
    ledger = again.samples[0].store["inspect_swarm:ledger"]
    assert ledger["stop_reason"] == "all_done"
    assert ledger["budget"]["grace"] == 5.0


def test_inside_task_solver(tmp_path: Path) -> None:
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes

    t = Task(
        dataset=[Sample(input="x", target="42")],
        solver=swarm(member(react, count=2), channels=[]),
        scorer=includes(),
    )
    [log] = eval(
        t,
        model=scripted_model({"members": {"*": [{"submit": "42"}]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success" and log.samples
    assert log.samples[0].scores and log.samples[0].scores["includes"].value == "C"
