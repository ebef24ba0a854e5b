"""member_scores(): the swarm's answer as the task scores it, and each member's own submission
as if it had answered alone, with what scoring the members cost kept apart."""

import math
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Epochs, Task, eval, score
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import (
    CORRECT,
    INCORRECT,
    Score,
    Scorer,
    Target,
    accuracy,
    includes,
    match,
    model_graded_qa,
    scorer,
)
from inspect_ai.solver import TaskState, generate
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

from inspect_swarm import member, member_scores, swarm
from inspect_swarm.sandbox import multidir
from inspect_swarm.scripted import scripted_model

from .helpers import ALL_RUN, run_log

THREE = swarm(member(react, count=3), controller=ALL_RUN, channels=[])


def scores_of(log: Any) -> dict[str, Score]:
    """The first sample's scores (every epoch of these scripts scores the same)."""
    assert log.status == "success", log.error
    return dict(log.samples[0].scores)


def test_the_answer_the_team_and_the_mean_member(backend: str, tmp_path: Path) -> None:
    log = run_log(
        THREE,
        {
            "react-1": [{"submit": "41"}],
            "react-2": [{"text": "x", "delay": 0.2}, {"submit": "42"}],
            "react-3": [{"text": "too long", "stop_reason": "model_length"}],
        },
        tmp_path,
        task_args={
            "scorer": [match(), member_scores(match())],
            "epochs": Epochs(2, ["mean", "max"]),
        },
    )
    scores = scores_of(log)
    own = scores["member_scores"]
    # react-1 answered first, and wrongly; react-2 alone would have been right
    assert scores["match"].value == INCORRECT
    assert own.value == {
        "answer": 0.0,
        "team": 1.0,
        "mean_member": 0.5,
        "mean_member_all": 0.5 / 1.5,
    }
    assert own.answer == scores["match"].answer == "41"
    assert own.metadata is not None
    assert own.metadata["members"] == {"react-1": 0.0, "react-2": 1.0, "react-3": None}
    # the answer's member is not scored twice: match() made no model call at all
    assert own.metadata["member_scoring"] == {"tokens": 0, "cost": 0, "models": {}}
    # each key is aggregated, under each epoch reducer
    assert log.results is not None
    metrics = {
        (s.name, s.reducer): {k: round(m.value, 4) for k, m in s.metrics.items()}
        for s in log.results.scores
        if s.scorer == "member_scores"
    }
    assert metrics[("team", "max")]["mean"] == 1.0
    assert metrics[("answer", "max")]["mean"] == 0.0
    assert metrics[("mean_member_all", "mean")]["mean"] == 0.3333
    assert set(metrics) == {
        (key, reducer)
        for key in ("answer", "team", "mean_member", "mean_member_all")
        for reducer in ("mean", "max")
    }


def test_no_submission_scores_nothing_and_the_mean_is_skipped(backend: str, tmp_path: Path) -> None:
    log = run_log(
        swarm(member(react, count=2), controller=ALL_RUN, channels=[]),
        {"*": [{"text": "too long", "stop_reason": "model_length"}]},
        tmp_path,
        task_args={"scorer": member_scores(includes())},
    )
    score = scores_of(log)["member_scores"]
    assert isinstance(score.value, dict)
    assert score.value["answer"] == 0.0 and score.value["team"] == 0.0
    assert score.value["mean_member_all"] == 0.0 and math.isnan(score.value["mean_member"])
    assert log.results is not None
    unscored = {s.name: s.unscored_samples for s in log.results.scores}
    assert unscored["mean_member"] == 1 and unscored["team"] == 0


def test_a_model_graded_scorer_costs_are_recorded_apart(backend: str, tmp_path: Path) -> None:
    grader = scripted_model({"members": {}, "then": {"text": "GRADE: C"}}, name="grader")
    log = run_log(
        THREE,
        {"*": [{"submit": "42"}]},
        tmp_path,
        task_args={"scorer": member_scores(model_graded_qa(model=grader))},
    )
    score = scores_of(log)["member_scores"]
    assert score.value == {"answer": 1.0, "team": 1.0, "mean_member": 1.0, "mean_member_all": 1.0}
    assert score.metadata is not None
    # the answer's grading is the task's own; the two other members' gradings are apart
    spent = score.metadata["member_scoring"]
    assert spent["tokens"] == 2 * 110 and spent["cost"] == pytest.approx(2 * 0.002)
    assert list(spent["models"]) == ["scripted/grader"]
    [sample] = log.samples or []
    assert sample.store["inspect_swarm:ledger"]["swarm"]["cost"] == pytest.approx(3 * 0.002)
    assert sample.model_usage["scripted/grader"].total_tokens == 3 * 110


@scorer(metrics=[accuracy()])
def left_in_sandbox() -> Scorer:
    """C when the default sandbox's answer.txt holds the target and no member's other
    sandbox can be reached."""

    async def score(state: TaskState, target: Target) -> Score:
        try:
            text = (await sandbox().read_file("answer.txt")).strip()
        except FileNotFoundError:
            return Score(value=INCORRECT)
        reachable = []
        for name in ("agent-1", "agent-2"):
            try:
                env = sandbox(name)
            except ValueError:
                continue
            if env is not sandbox():
                reachable.append(name)
        return Score(value=CORRECT if text == target.text and not reachable else INCORRECT)

    return score


@pytest.mark.parametrize("first", ["agent-1", "agent-2"])
def test_a_sandbox_scorer_sees_each_members_own_sandbox(
    backend: str, tmp_path: Path, first: str
) -> None:
    def write(text: str) -> dict[str, Any]:
        return {"tool": "bash", "arguments": {"command": f"echo {text} > answer.txt"}}

    def turns(name: str, text: str) -> list[dict[str, Any]]:
        # the member that is not first waits (past the other's sandbox tools install, which
        # members take in turn), so the answer (mode "first") is the other's
        wait = [] if name == first else [{"text": "x", "delay": 2.0}]
        return [write(text), *wait, {"submit": text}]

    [log] = eval(
        Task(
            dataset=[Sample(input="Leave 42 in answer.txt.", target="42")],
            solver=swarm(
                member(react, {"tools": [bash()]}, name="agent", count=2, sandbox="{member}"),
                controller=ALL_RUN,
                channels=[],
            ),
            scorer=member_scores(left_in_sandbox()),
            sandbox=multidir("default", "agent-1", "agent-2"),
        ),
        model=scripted_model(
            {
                "members": {
                    "agent-1": turns("agent-1", "41"),
                    "agent-2": turns("agent-2", "42"),
                }
            }
        ),
        log_dir=str(tmp_path),
        display="none",
    )
    score = scores_of(log)["member_scores"]
    assert score.metadata is not None
    # the task's own view (the default sandbox) has no answer.txt; agent-2's has 42, also
    # when agent-2's submission is the swarm's answer
    assert log.samples is not None
    assert log.samples[0].output.completion == ("41" if first == "agent-1" else "42")
    assert score.metadata["members"] == {"agent-1": 0.0, "agent-2": 1.0}
    assert isinstance(score.value, dict) and score.value["answer"] == 0.0


def test_refusals(tmp_path: Path) -> None:
    [plain] = eval(
        Task(
            dataset=[Sample(input="6 x 7?", target="42")],
            solver=generate(),
            scorer=member_scores(match()),
        ),
        model=scripted_model({"members": {"main": ["42"]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert plain.status == "error" and plain.error is not None
    assert "has no swarm result record" in plain.error.message
    assert "use member_scores() on a task whose solver is swarm()" in plain.error.message

    @scorer(metrics=[{"*": [accuracy()]}])
    def two_parts() -> Scorer:
        async def score(state: TaskState, target: Target) -> Score:
            return Score(value={"a": 1, "b": 0})

        return score

    log = run_log(
        THREE, {"*": [{"submit": "42"}]}, tmp_path, task_args={"scorer": member_scores(two_parts())}
    )
    assert log.status == "error" and log.error is not None
    assert "needs a scorer that returns one Score with a single value" in log.error.message


def test_a_log_is_rescored_afterwards(tmp_path: Path) -> None:
    log = run_log(
        THREE,
        {
            "react-1": [{"submit": "41"}],
            "react-2": [{"text": "x", "delay": 0.2}, {"submit": "42"}],
            "react-3": [{"text": "x", "delay": 0.1}, {"submit": "7"}],
        },
        tmp_path,
    )
    # the swarm owns three store keys: the submissions member_scores() reads are in the events
    [sample] = log.samples or []
    assert sorted(k for k in sample.store if k.startswith("inspect_swarm:")) == [
        "inspect_swarm:ledger", "inspect_swarm:metrics", "inspect_swarm:result",
    ]  # fmt: skip
    # so member_scores() works on a finished log too
    rescored = score(log, member_scores(match()), action="append", display="none")
    own = scores_of(rescored)["member_scores"]
    assert own.value == {
        "answer": 0.0, "team": 1.0, "mean_member": pytest.approx(1 / 3),
        "mean_member_all": pytest.approx(1 / 3),
    }  # fmt: skip
    assert own.metadata == {
        "members": {"react-1": 0.0, "react-2": 1.0, "react-3": 0.0},
        "member_scoring": None,  # no sample was running: what it cost is unknown
    }
