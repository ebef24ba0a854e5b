"""The `inspect-swarm` CLI end to end against a real server, and its parsing."""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from inspect_swarm.server._cli import main, parse_duration, read_inputs

from .conftest import KEY, Server, cli, needs_namespaces, start_server


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def swarms(
    server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """`inspect-swarm swarms ...` in this process (the server is a real one)."""
    monkeypatch.setenv("MARITIME_API_URL", server.url)
    monkeypatch.setenv("MARITIME_API_KEY", KEY)

    def run(*args: str) -> Result:
        try:
            code = main(["swarms", *args])
        except SystemExit as ex:
            code = int(ex.code or 0)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def test_parse_durations() -> None:
    assert [parse_duration(t) for t in ("600", "90s", "10m", "1h30m", "2h")] == [
        600,
        90,
        600,
        5400,
        7200,
    ]
    for bad in ("", "10x", "m", "1.5h"):
        with pytest.raises(argparse.ArgumentTypeError, match="1h30m"):
            parse_duration(bad)


def test_inputs_file(tmp_path: Path) -> None:
    path = tmp_path / "inputs.jsonl"
    path.write_text('{"args": ["--seed", "1"]}\n\n{"env": {"A": "1"}}\n')
    assert read_inputs(path) == [{"args": ["--seed", "1"]}, {"env": {"A": "1"}}]
    path.write_text('{"argz": []}\n')
    with pytest.raises(ValueError, match="line 1"):
        read_inputs(path)


@needs_namespaces
def test_run_wait_exit_codes_and_results(swarms: Callable[..., Result], tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"args": ["0"]}\n{"args": ["0"]}\n')
    ok = swarms(
        "run",
        "--inputs",
        str(inputs),
        "--command",
        "exit",
        "--size",
        "1x1",
        "--timeout",
        "1m",
        "--wait",
        "--poll-interval",
        "0.1",
        "-o",
        str(tmp_path / "ok.jsonl"),
    )
    assert ok.returncode == 0, ok.stderr
    assert "2 succeeded, 0 failed" in ok.stdout
    assert "2/2 done" in ok.stderr  # the progress line
    lines = (tmp_path / "ok.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in lines] == ["succeeded"] * 2

    bad = swarms(
        "run",
        "--count",
        "2",
        "--size",
        "1x1",
        "--wait",
        "--poll-interval",
        "0.1",
        "--command",
        'exit "$MARITIME_SWARM_INDEX"',
    )
    assert bad.returncode == 1 and "1 succeeded, 1 failed" in bad.stdout
    run_id = bad.stdout.split()[3]

    listed = swarms("list")
    assert listed.returncode == 0 and run_id[:12] in listed.stdout
    got = swarms("get", run_id)
    assert json.loads(got.stdout)["id"] == run_id
    results = swarms("results", run_id)
    assert [json.loads(x)["exitCode"] for x in results.stdout.splitlines()] == [0, 1]
    cancelled = swarms("cancel", run_id)
    assert cancelled.returncode == 0 and "completed" in cancelled.stdout


@needs_namespaces
def test_cli_errors_are_clear(swarms: Callable[..., Result]) -> None:
    usage = swarms("run", "--count", "1", "--command", "true", "--size", "big")
    assert usage.returncode == 2 and "--size" in usage.stderr and "2x4" in usage.stderr
    api = swarms("run", "--count", "1", "--command", "true", "--timeout", "99h")
    assert api.returncode == 1 and "timeoutSeconds" in api.stderr
    missing = swarms("get", "nope")
    assert missing.returncode == 1 and "not_found" in missing.stderr


def test_server_makes_a_key_when_given_none(tmp_path: Path) -> None:
    process = subprocess.Popen(
        cli(
            "server",
            "--port",
            "0",
            "--state-dir",
            str(tmp_path / "s"),
            "--isolation",
            "process",
            "--ready-file",
            str(tmp_path / "ready"),
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(3)]
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert banner[0].startswith("inspect-swarm server on http://127.0.0.1:")
    key = banner[2].strip().removeprefix("MARITIME_API_KEY=")
    assert key.startswith("isk_") and (tmp_path / "s" / "api-key").read_text().strip() == key


def test_process_mode_says_it_is_weaker(tmp_path: Path) -> None:
    weak = start_server(tmp_path / "state", "--isolation", "process", "--memory-gib", "2")
    try:
        with weak.client() as client:
            run = client.swarms.start(
                'cat "$MARITIME_SANDBOX_ROOT/in.txt"; echo r > "$MARITIME_SANDBOX_ROOT/out"',
                count=2,
                size="1x1",
                files={"/in.txt": "input"},
                result_path="/out",
            )
            done = client.swarms.wait(run["id"], timeout=60)
    finally:
        weak.kill()
    assert done["isolation"]["mode"] == "process"
    assert "WEAKER ISOLATION" in done["isolation"]["note"]
    assert [(s["stdoutTail"], s["result"]) for s in done["sandboxes"]] == [("input", "r\n")] * 2
