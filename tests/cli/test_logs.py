"""`inspect-swarm show` and `inspect-swarm plot` on real logs of the scripted model, as a user
runs them: the console script in a process of its own, in a pipe or on a terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from getting_started import getting_started
from inspect_ai import eval
from inspect_ai.log import list_eval_logs, read_eval_log

from inspect_swarm.scripted import scripted_model

from ..analysis.swarm_logs import build
from ..servers import run_script
from .test_cli import on_terminal
from .test_startup import imported

RECORDS = ("inspect_swarm:result", "inspect_swarm:ledger", "inspect_swarm:metrics")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("arms")
    build(log_dir)
    return log_dir


def log_of(logs: Path, k: int) -> str:
    [location] = [
        info.name
        for info in list_eval_logs(str(logs))
        if read_eval_log(info.name, header_only=True).eval.task_args["k"] == k
    ]
    return location.removeprefix("file://")


def test_a_log_directory_is_one_line_per_sample(logs: Path) -> None:
    done = run_script("show", str(logs))
    assert done.returncode == 0, done.stderr
    header, *lines = [line.split("\t") for line in done.stdout.splitlines()]
    # a pipe gets the column names too, and the answer beside the member it came from
    assert header == [
        "TASK", "ARM", "SAMPLE", "EPOCH", "ANSWER", "FROM", "STOP", "REACHED", "SCORE", "COST $",
    ]  # fmt: skip
    assert len(lines) == 8
    rows = {(row[1], row[2], row[3]): row for row in lines}
    assert set(rows) == {
        (f"k={k}", s, e) for k in (2, 3) for s in ("count", "product") for e in "12"
    }
    for (arm, sample, _), row in rows.items():
        task, _, _, _, answer, member, stop, reached, score, cost = row
        assert (task, member, stop, score) == ("arm", "w-1", "submitted", "C")
        assert answer == ("25" if sample == "count" else "42")
        others = ["w-2"] if arm == "k=2" else ["w-2", "w-3"]
        expected = "; ".join(f"{m} token share" for m in others) if sample == "product" else "-"
        assert reached == expected
        assert float(cost) > 0


def test_one_sample_in_a_pipe_and_as_json(logs: Path) -> None:
    log = log_of(logs, 3)
    done = run_script("show", log, "--sample", "product")
    assert done.returncode == 0, done.stderr
    blocks = done.stdout.split("\n\n")
    assert len(blocks) == 4  # each epoch: its fields, then its members
    fields = dict(line.split(":\t", 1) for line in blocks[0].splitlines())
    assert fields["sample"] == "product (epoch 1) of arm [k=3]"
    assert fields["answer"] == "`42` from w-1 (the first submission)"
    assert fields["stopped"] == "w-1 submitted first"
    assert fields["reached"] == (
        "w-2 reached its token share (500): 550 used; w-3 reached its token share (500): 550 used"
    )
    header, *members = [line.split("\t") for line in blocks[1].splitlines()]
    assert header[:3] == ["MEMBER", "STATUS", "TIME"]
    # times to the hundredth, all of them
    assert all(re.fullmatch(r"\d+\.\d\d s", m[2]) for m in members), members
    assert [(m[0], m[1], m[6]) for m in members] == [
        ("w-1", "submitted", "1"), ("w-2", "share", "0"), ("w-3", "share", "0"),
    ]  # fmt: skip

    as_json = run_script("show", log, "--sample", "product", "--json")
    assert as_json.returncode == 0, as_json.stderr
    shown = json.loads(as_json.stdout)
    whole = {s.epoch: s for s in read_eval_log(log).samples or [] if s.id == "product"}
    assert [s["epoch"] for s in shown] == [1, 2]
    for s in shown:
        sample = whole[s["epoch"]]
        result, ledger, metrics = (sample.store[key] for key in RECORDS)
        swarm = s["swarm"]
        assert (swarm["member"], swarm["mode"], swarm["stop_reason"]) == (
            "w-1",
            "first",
            "submitted",
        )
        assert swarm["answer"] == sample.output.completion == "42"
        assert [m["status"] for m in swarm["members"]] == [m["status"] for m in result["members"]]
        assert [m["tokens"] for m in swarm["members"]] == [m["tokens"] for m in metrics["members"]]
        assert [r["member"] for r in swarm["reached"]] == ["w-2", "w-3"]
        assert swarm["cost"] == metrics["cost"] and ledger["stop_reason"] == "submitted"
        assert s["scores"]["includes"] == "C" and s["arm"] == {"k": 3}


def test_a_terminal_gets_tables(logs: Path) -> None:
    done = on_terminal("show", log_of(logs, 2), "--sample", "count")
    assert done.returncode == 0, done.stderr
    assert "Answer" in done.stdout and "`25` from w-1 (the first submission)" in done.stdout
    header = next(line for line in done.stdout.splitlines() if "MEMBER" in line)
    assert header.split()[:3] == ["MEMBER", "STATUS", "TIME"]
    # at 80 columns the cells fold, never a header's word
    narrow = on_terminal("show", log_of(logs, 2), "--sample", "count", columns=80)
    assert narrow.returncode == 0, narrow.stderr
    assert "SUBMISSIONS" in narrow.stdout and "SUBMISSI\n" not in narrow.stdout


def test_mistakes_are_named(logs: Path, tmp_path: Path) -> None:
    missing = run_script("show", str(logs), "--sample", "nope")
    assert missing.returncode == 1 and "has no sample with id 'nope'" in missing.stderr
    nowhere = run_script("show", str(tmp_path / "nowhere"))
    assert nowhere.returncode == 1 and "no such log or log directory" in nowhere.stderr
    which = run_script("plot", "timeline", str(logs), "-o", str(tmp_path / "t.png"))
    assert which.returncode == 1 and "Give --sample ID" in which.stderr
    jpeg = run_script("plot", "sweep", str(logs), "-o", str(tmp_path / "t.jpg"))
    assert jpeg.returncode == 1 and "neither .png nor .svg" in jpeg.stderr
    # the sample is in both logs of the directory: which one is asked for
    both = run_script("plot", "comm", str(logs), "--sample", "count", "-o", str(tmp_path / "c.png"))
    assert both.returncode == 1 and "is in 2 logs" in both.stderr
    # a file that is no log is named, not Inspect's words for it
    (tmp_path / "notes.txt").write_text("hello")
    not_log = run_script("show", str(tmp_path / "notes.txt"))
    assert not_log.returncode == 1 and "notes.txt: not an Inspect log" in not_log.stderr
    assert "Give an .eval or .json log" in not_log.stderr


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_each_view(logs: Path, tmp_path: Path, suffix: str) -> None:
    log = log_of(logs, 3)
    for view, args in [
        ("timeline", [log, "--sample", "count"]),
        ("comm", [log, "--sample", "count", "--epoch", "2"]),
        ("sweep", [str(logs)]),
    ]:
        out = tmp_path / f"{view}{suffix}"
        done = run_script("plot", view, *args, "-o", str(out))
        assert done.returncode == 0, done.stderr
        assert f"wrote {out}" in done.stderr
        data = out.read_bytes()
        assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data


def test_show_and_plot_import_inspect_ai_only_when_they_run(logs: Path) -> None:
    for command in (["show", "--help"], ["plot", "--help"]):
        modules = imported(*command)
        assert "inspect_swarm.cli._logs" in modules
        assert not {m for m in modules if m.split(".")[0] == "inspect_ai"}, command
    assert "inspect_ai.log" in imported("show", str(logs))


def test_show_reads_logs_on_the_backend_inspect_is_told_to_use(
    backend: str, tmp_path: Path
) -> None:
    # INSPECT_ASYNC_BACKEND (set by `backend`) chooses the loop of the eval, and of inspect_ai's
    # log reader in show, plot and replay
    examples = Path(__file__).parents[2] / "examples"
    [written] = eval(
        getting_started(k=3),
        model=scripted_model(examples / "getting_started.yaml", name="demo"),
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    done = run_script("show", str(tmp_path / "logs"))
    assert done.returncode == 0, done.stderr
    answers = {
        row[2]: (row[4], row[5])
        for row in (line.split("\t") for line in done.stdout.splitlines()[1:])
    }
    assert answers == {
        "product": ("42", "react-2"), "sum": ("42", "react-1"), "power": ("1024", "react-3")
    }  # fmt: skip
    plotted = run_script(
        "plot", "timeline", written.location, "--sample", "sum", "-o", str(tmp_path / "t.svg")
    )
    assert plotted.returncode == 0, plotted.stderr
    replayed = run_script("replay", written.location, "-o", str(tmp_path / "replay.yaml"))
    assert replayed.returncode == 0, replayed.stderr
