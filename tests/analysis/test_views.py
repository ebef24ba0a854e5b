"""Reading swarms out of real logs: the store reader, members_df(), SwarmOutcomeColumns, and the
data behind each plot, checked against what inspect_ai's own log API reads."""

import json
import math
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from inspect_ai import Task, eval
from inspect_ai.agent import react
from inspect_ai.analysis import SampleSummary, samples_df
from inspect_ai.dataset import Sample
from inspect_ai.event import InfoEvent, ModelEvent
from inspect_ai.log import EvalSample, list_eval_logs, read_eval_log
from inspect_ai.scorer import includes, value_to_float

from inspect_swarm import member, swarm
from inspect_swarm.analysis import (
    SwarmColumns,
    SwarmOutcomeColumns,
    comm_reads,
    members_df,
    plot_comm,
    plot_sweep,
    plot_timeline,
    swarm_timeline,
    sweep_arms,
)
from inspect_swarm.analysis._read import priced_cost, read_sample, read_swarm_samples
from inspect_swarm.scripted import scripted_model

from .swarm_logs import GRACE

RECORDS = ("inspect_swarm:result", "inspect_swarm:ledger", "inspect_swarm:metrics")


def full_samples(log_dir: Path) -> list[tuple[Any, EvalSample]]:
    """Every sample of every log, read whole by inspect_ai."""
    return [
        (log, s)
        for info in list_eval_logs(str(log_dir))
        for log in [read_eval_log(info.name)]
        for s in log.samples or []
    ]


@pytest.mark.parametrize("fixture", ["arm_logs", "arm_json_logs"])
def test_the_reader_reads_what_the_log_api_reads(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    log_dir: Path = request.getfixturevalue(fixture)
    read = {(s.task, json.dumps(s.arm), str(s.id), s.epoch): s for s in read_swarm_samples(log_dir)}
    whole = full_samples(log_dir)
    assert len(read) == len(whole) == 8
    for log, s in whole:
        mine = read[(log.eval.task, json.dumps(log.eval.task_args), str(s.id), s.epoch)]
        assert mine.records is not None
        assert [mine.records.result, mine.records.ledger, mine.records.metrics] == [
            s.store[key] for key in RECORDS
        ]
        assert mine.answer == s.output.completion
        assert mine.scores["includes"]["value"] == s.scores["includes"].value
        assert mine.scores["member_scores"]["metadata"] == s.scores["member_scores"].metadata
        assert mine.cost == priced_cost(s) and mine.arm == log.eval.task_args
        assert mine.model == "scripted/arms" and mine.eval_id == log.eval.eval_id


def test_the_reader_stops_at_the_swarms_records(arm_logs: Path, tmp_path: Path) -> None:
    # a copy of a log whose first sample's events are cut off mid-way: the log API cannot
    # parse that sample, and the reader, which stops at its records, never reaches the cut
    [first, *_] = sorted(arm_logs.glob("*.eval"))
    cut = tmp_path / first.name
    with zipfile.ZipFile(first) as source, zipfile.ZipFile(cut, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "samples/count_epoch_1.json":
                data = data[: data.index(b'"events"') + 100]
            target.writestr(item, data)
    with pytest.raises(ValueError):
        read_sample(cut, "count")
    [read] = read_swarm_samples(cut, sample="count")[:1]
    [expected] = [s for s in read_swarm_samples(first, sample="count") if s.epoch == 1]
    assert read.records == expected.records and read.answer == expected.answer


def test_members_df_has_a_row_per_member_as_the_records_say(arm_logs: Path) -> None:
    df = members_df(arm_logs, quiet=True)
    whole = full_samples(arm_logs)
    assert len(df) == sum(len(s.store["inspect_swarm:result"]["members"]) for _, s in whole)
    for log, s in whole:
        result, ledger, metrics = (s.store[key] for key in RECORDS)
        rows = df[
            (df["id"] == s.id)
            & (df["epoch"] == s.epoch)
            & (df["task_arg_k"] == log.eval.task_args["k"])
        ]
        assert list(rows["member"]) == [m["name"] for m in result["members"]]
        assert set(rows["sample_id"]) == {s.uuid} and set(rows["eval_id"]) == {log.eval.eval_id}
        own = s.scores["member_scores"].metadata["members"]
        for row, entry, spent, acted in zip(
            rows.to_dict("records"),
            result["members"],
            ledger["members"],
            metrics["members"],
            strict=True,
        ):
            assert (row["status"], row["submitted"], row["time"]) == (
                entry["status"],
                entry["submitted"],
                entry["time"],
            )
            assert row["answer"] == (entry["name"] == result["final"]["member"])
            assert (row["tokens"], row["cost"], row["steps"]) == (
                acted["tokens"],
                acted["cost"],
                acted["steps"],
            )
            assert (row["calls"], row["background_started"]) == (
                spent["calls"]["calls"],
                spent["background_started"],
            )
            board = acted["comm"]["shared_memory"]
            assert (row["comm_shared_memory_records"], row["comm_shared_memory_reads"]) == (
                board["records"],
                board["reads"],
            )
            assert row["waits"] == acted["waits"]
            expected = own[entry["name"]]
            assert (expected is None and math.isnan(row["score_member_scores"])) or (
                row["score_member_scores"] == expected
            )
            assert row["submissions"] == int(entry["submitted"])
            for wiring in ("tools_unwired", "notify_unwired"):
                assert row[wiring] == (entry["name"] in metrics[wiring])
    # a member that waited has its wait outcomes as columns
    assert (df["waits_news"].fillna(0) > 0).any()


def test_outcome_columns_and_swarm_columns_side_by_side(arm_logs: Path) -> None:
    df = samples_df(
        arm_logs, columns=SampleSummary + SwarmColumns + SwarmOutcomeColumns, quiet=True
    )
    by_sample = {(s.uuid): s for _, s in full_samples(arm_logs)}
    for row in df.to_dict("records"):
        s = by_sample[row["sample_id"]]
        result, ledger, metrics = (s.store[key] for key in RECORDS)
        assert row["swarm_stop_reason"] == ledger["stop_reason"] == "submitted"
        assert row["swarm_answer_member"] == result["final"]["member"] == "w-1"
        assert row["swarm_answer_mode"] == "first"
        assert row["swarm_steps_to_answer"] == metrics["steps_to_answer"]
        assert row["swarm_members_submitted"] == sum(m["submitted"] for m in result["members"])
        assert row["swarm_members_never_acted"] == len(metrics["never_acted"])
        assert row["swarm_wall_clock"] == metrics["wall_clock"]
        assert row["swarm_members"] == len(result["members"])  # SwarmColumns, as before
    assert set(df["swarm_members_never_acted"]) == {0, 1}  # w-3 in `count`, cancelled


def one_sample(log_dir: Path, k: int, sample: str) -> EvalSample:
    [log] = [
        read_eval_log(info.name)
        for info in list_eval_logs(str(log_dir))
        if read_eval_log(info.name, header_only=True).eval.task_args["k"] == k
    ]
    return read_sample(log.location, sample)


def test_the_timeline_of_the_board_sample(arm_logs: Path) -> None:
    sample = one_sample(arm_logs, 3, "count")
    timeline = swarm_timeline(sample)
    assert timeline.members == ["w-1", "w-2", "w-3"]
    spans = [(s.member, s.kind, s.label) for s in sorted(timeline.spans, key=lambda s: s.start)]
    by_member = {m: [(k, label) for who, k, label in spans if who == m] for m in timeline.members}
    assert by_member["w-1"] == [
        ("model", "scripted/arms"), ("tool", "shared_memory"), ("model", "scripted/arms"),
        ("wait", "swarm_wait"), ("model", "scripted/arms"), ("tool", "shared_memory"),
        ("model", "scripted/arms"),
    ]  # fmt: skip
    assert by_member["w-2"] == [
        ("model", "scripted/arms"), ("model", "scripted/arms"), ("tool", "shared_memory"),
        ("model", "scripted/arms"), ("tool", "shared_memory"),
    ]  # fmt: skip
    assert by_member["w-3"] == [("model", "scripted/arms")]
    model_calls = [e for e in sample.events if isinstance(e, ModelEvent)]
    assert len(model_calls) == sum(1 for _, k, _ in spans if k == "model")
    marks = [(m.member, m.kind) for m in timeline.marks if m.kind != "end"]
    assert sorted(marks) == [("w-1", "read"), ("w-1", "write"), ("w-2", "read"), ("w-2", "write")]
    ends = {m.member: m.label for m in timeline.marks if m.kind == "end"}
    assert ends == {"w-1": "submitted", "w-2": "stopped", "w-3": "cancelled"}
    # w-1's write comes before its wait ends, which comes after w-2's write
    write = {m.member: m.time for m in timeline.marks if m.kind == "write"}
    [wait] = [s for s in timeline.spans if s.kind == "wait"]
    assert write["w-1"] <= wait.start and write["w-2"] <= wait.end
    # the stop began at the first submission; the grace period runs from it to the end
    stop = next(
        e
        for e in sample.events
        if isinstance(e, InfoEvent) and isinstance(e.data, dict) and e.data.get("type") == "stop"
    )
    assert (timeline.stop, timeline.stop_reason) == (stop.data["time"], "submitted")  # type: ignore[index]
    assert timeline.grace_end == min(stop.data["time"] + GRACE, timeline.end)  # type: ignore[index]
    assert timeline.end == max(m["time"] for m in sample.store[RECORDS[0]]["members"])


def test_the_timeline_lanes_follow_the_roster_on_each_backend(backend: str, tmp_path: Path) -> None:
    # the members' spans begin in the order their tasks start, which trio shuffles at random:
    # with six samples, one of them almost surely starts its members out of roster order
    [log] = eval(
        Task(
            dataset=[Sample(input="x", target="42", id=n) for n in range(6)],
            solver=swarm(member(react, count=3), channels=[]),
            scorer=includes(),
        ),
        model=scripted_model(
            {"members": {"react-2": [{"submit": "42"}], "*": [{"text": "Hmm.", "after": "stop"}]}}
        ),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples and len(log.samples) == 6
    for sample in log.samples:
        assert swarm_timeline(sample).members == ["react-1", "react-2", "react-3"], sample.id


def test_the_timeline_counts_calls_the_swarm_cancelled(arm_logs: Path) -> None:
    timeline = swarm_timeline(one_sample(arm_logs, 3, "count"))
    [cut] = [s for s in timeline.spans if s.member == "w-3"]
    ends = {m.member: m for m in timeline.marks if m.kind == "end"}
    # w-3's 30-second call lasted until the swarm cancelled it, after the grace period
    assert (cut.kind, cut.end) == ("model", ends["w-3"].time) and ends["w-3"].label == "cancelled"
    assert timeline.stop is not None and ends["w-3"].time >= timeline.stop + GRACE


def test_who_read_whose_writes(arm_logs: Path) -> None:
    sample = one_sample(arm_logs, 3, "count")
    # each member viewed the board once, after w-2's append: both saw w-2's version
    assert comm_reads(sample) == {("w-2", "w-1"): 1}
    with pytest.raises(ValueError, match="has no swarm"):
        comm_reads(sample.model_copy(update={"events": []}))


def test_the_sweep_pools_each_arm_over_samples_and_epochs(arm_logs: Path) -> None:
    arms = sweep_arms(arm_logs)
    assert [a.label for a in arms] == ["k=2", "k=3"]
    whole = full_samples(arm_logs)
    for arm in arms:
        mine = [s for log, s in whole if log.eval.task_args == arm.arm]
        assert sorted(arm.scores) == sorted(
            value_to_float()(s.scores["includes"].value) for s in mine
        )
        assert sorted(arm.costs) == sorted(priced_cost(s) for s in mine)
        # at k=3, the cancelled w-3's call in flight is unknown
        assert arm.complete is (arm.arm["k"] == 2)
    # w-1 alone submits in every sample
    by_key = sweep_arms(arm_logs, scorer="member_scores", key="mean_member_all")
    assert [a.scores for a in by_key] == [[1 / 2] * 4, pytest.approx([1 / 3] * 4)]
    with pytest.raises(
        ValueError, match=r"no sample was scored by 'includs'.*includes, member_scores"
    ):
        sweep_arms(arm_logs, scorer="includs")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_each_plot_writes_a_file(arm_logs: Path, tmp_path: Path, suffix: str) -> None:
    sample = one_sample(arm_logs, 3, "count")
    for name, figure in [
        ("timeline", plot_timeline(sample)),
        ("comm", plot_comm(sample)),
        ("sweep", plot_sweep(arm_logs)),
    ]:
        path = tmp_path / f"{name}{suffix}"
        figure.savefig(path)
        head = path.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in path.read_bytes()


def test_a_swarm_without_a_channel_and_two_tasks_are_said(arm_logs: Path, tmp_path: Path) -> None:
    solo = Task(
        dataset=[Sample(id="q", input="What is 6 times 7?", target="42")],
        solver=swarm(member(react, count=2), channels=[]),
        scorer=includes(),
        name="solo",
    )
    [log] = eval(
        solo,
        model=scripted_model({"members": {"*": [{"submit": "42"}]}}),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples
    with pytest.raises(ValueError, match="had no channel that records"):
        plot_comm(read_sample(log.location, "q"))
    # beside another task's logs, it is no arm of their sweep
    first = next(arm_logs.glob("*.eval"))
    shutil.copy(first, tmp_path / first.name)
    with pytest.raises(ValueError, match=r"the logs hold 2 tasks \(arm, solo\)"):
        sweep_arms(tmp_path)
