"""The `inspect-swarm` CLI end to end against real servers, as a user runs it: the console
script in a process of its own, in a pipe or on a terminal, with a config of the test's own."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from inspect_swarm.cli._options import parse_duration, read_inputs
from inspect_swarm.client import SwarmsClient

from ..servers import KEY, SCRIPT, Server, cli, run_script, start_server


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user with nothing exported and a config of their own (empty at first)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MARITIME_API_URL", raising=False)
    monkeypatch.delenv("MARITIME_API_KEY", raising=False)
    return tmp_path / "config" / "inspect-swarm"


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Result:
    """`inspect-swarm ARGS` in a pipe, as a script runs it."""
    done = run_script(*args, stdin=stdin, env=env)
    return Result(done.returncode, done.stdout, done.stderr)


def on_terminal(*args: str, columns: int | None = None) -> Result:
    """`inspect-swarm ARGS` with its stdout on a terminal (a pty), as a person runs it; one
    `columns` wide if given."""
    controller, terminal = pty.openpty()
    env = {**os.environ, **({"COLUMNS": str(columns)} if columns else {})}
    process = subprocess.Popen(
        [SCRIPT, *args], stdout=terminal, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    code = process.wait(timeout=60)
    text = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r\n", "\n")
    return Result(code, text, stderr)


@pytest.fixture
def local(home: Path, server: Server) -> Server:
    """The module's server, recorded as the current context `test`."""
    from inspect_swarm.client._contexts import Context, record

    record(Context("test", server.url, KEY, "login"), make_current=True)
    return server


# parsing


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
    bad = run("swarms", "run", "--command", "true", "--inputs", str(path))
    assert bad.returncode == 2 and "--inputs" in bad.stderr and "line 1" in bad.stderr


# identity


def test_version_help_and_usage_errors(home: Path) -> None:
    assert run("--version").stdout == f"inspect-swarm {version('inspect_swarm')}\n"
    for bare in ([], ["swarms"], ["sandboxes"], ["context"]):
        shown = run(*bare)
        assert shown.returncode == 0 and shown.stdout.startswith("usage: inspect-swarm")
        assert "COMMAND" in shown.stdout and shown.stderr == ""
    assert run("swarms", "run", "--help").returncode == 0
    for wrong in (["swarms", "lst"], ["swarms", "get"], ["--nope"], ["swarms", "run", "--wait"]):
        refused = run(*wrong)
        assert refused.returncode == 2, wrong
        assert refused.stderr.startswith("usage: inspect-swarm"), refused.stderr
        assert "error:" in refused.stderr


def test_global_options_before_or_after_the_command(home: Path, server: Server) -> None:
    where = ["--api-url", server.url, "--api-key", KEY, "-v"]
    before = run(*where, "swarms", "list")
    after = run("swarms", "list", *where)
    assert before.returncode == after.returncode == 0, after.stderr
    assert before.stdout == after.stdout
    said = f"talking to {server.url} (from --api-url)"
    assert said in before.stderr and said in after.stderr


# where to talk


def test_no_silent_default_server(home: Path, tmp_path: Path) -> None:
    nowhere = run("swarms", "list")
    assert nowhere.returncode == 1
    assert "no swarm server chosen" in nowhere.stderr
    assert "inspect-swarm server" in nowhere.stderr and "--api-url" in nowhere.stderr
    assert "api.maritime.sh" not in nowhere.stderr + nowhere.stdout
    keyless = run("swarms", "list", env={**os.environ, "MARITIME_API_URL": "http://127.0.0.1:9"})
    assert keyless.returncode == 1
    assert "no API key for http://127.0.0.1:9 (from MARITIME_API_URL)" in keyless.stderr
    assert "--api-key" in keyless.stderr and "pass api_key" not in keyless.stderr
    with pytest.raises(ValueError, match="base_url="):
        SwarmsClient()  # in Python terms from Python


def test_an_unreachable_server_is_named_with_how_to_choose_another(home: Path) -> None:
    from inspect_swarm.client._contexts import Context, record

    record(Context("gone", "http://127.0.0.1:9", "k", "login"), make_current=True)
    failed = run("swarms", "list")
    assert failed.returncode == 1
    assert "cannot reach http://127.0.0.1:9" in failed.stderr
    assert "server: http://127.0.0.1:9 (from context 'gone')" in failed.stderr
    assert "--context NAME" in failed.stderr and "context use" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_login_records_a_server_and_contexts_choose_one(home: Path, server: Server) -> None:
    typed = run("login", "--url", server.url, "--name", "there", stdin=KEY + "\n")
    assert typed.returncode == 0, typed.stderr
    assert KEY not in typed.stdout + typed.stderr  # never echoed
    assert "'there' is now the current one" in typed.stdout
    path = home / "contexts.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert run("swarms", "list").returncode == 0  # nothing exported
    assert SwarmsClient().base_url == server.url  # and from Python

    refused = run("login", "--url", server.url, "--name", "bad", "--key", "wrong")
    assert refused.returncode == 1 and "401" in refused.stderr and server.url in refused.stderr
    assert "bad" not in json.loads(path.read_text())["contexts"]

    from inspect_swarm.client._contexts import Context, record

    record(Context("elsewhere", "http://127.0.0.1:9", "other", "login"), make_current=False)
    listed = run("context", "list", "--json")
    assert json.loads(listed.stdout) == [
        {"name": "elsewhere", "url": "http://127.0.0.1:9", "origin": "login", "current": False},
        {"name": "there", "url": server.url, "origin": "login", "current": True},
    ]
    table = run("context", "list")
    assert table.stdout.splitlines() == [
        "\telsewhere\thttp://127.0.0.1:9\tlogin",
        f"*\tthere\t{server.url}\tlogin",
    ]
    assert KEY not in table.stdout and "other" not in table.stdout
    assert run("context", "use", "elsewhere").returncode == 0
    assert "127.0.0.1:9" in run("swarms", "list").stderr
    # the environment comes before the current context, and a flag before both
    with_env = {**os.environ, "MARITIME_API_URL": server.url, "MARITIME_API_KEY": KEY}
    assert run("swarms", "list", env=with_env).returncode == 0
    assert "note: MARITIME_API_URL is set" in run("context", "use", "there", env=with_env).stderr
    assert run("--context", "elsewhere", "swarms", "list", env=with_env).returncode == 1
    unknown = run("context", "use", "nowhere")
    assert unknown.returncode == 1 and "there are: elsewhere, there" in unknown.stderr
    assert run("context", "remove", "there").returncode == 0
    assert [c["name"] for c in json.loads(run("context", "list", "--json").stdout)] == ["elsewhere"]


def test_login_asks_for_the_key_without_showing_it(home: Path, server: Server) -> None:
    pid, terminal = pty.fork()  # the command's controlling terminal, as in a person's shell
    if pid == 0:
        os.execv(SCRIPT, [SCRIPT, "login", "--url", server.url, "--name", "typed"])
    shown = b""
    while b"API key" not in shown:
        shown += os.read(terminal, 1024)
    os.write(terminal, KEY.encode() + b"\n")
    while True:
        try:
            chunk = os.read(terminal, 1024)
        except OSError:  # the command has ended
            break
        if not chunk:
            break
        shown += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, shown
    assert b"'typed' is now the current one" in shown and KEY.encode() not in shown
    assert SwarmsClient().base_url == server.url


def test_a_server_records_its_context_unless_told_not_to(home: Path, tmp_path: Path) -> None:
    quiet = start_server(tmp_path / "quiet", "--isolation", "process")  # with --no-context
    quiet.kill()
    assert not home.exists()
    from inspect_swarm.client._contexts import Context, load, record

    record(Context("hosted", "http://127.0.0.1:9", "k", "login"), make_current=True)
    process = subprocess.Popen(
        cli("server", "--port", "0", "--state-dir", str(tmp_path / "s"), "--isolation", "process"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(5)]
    finally:
        process.terminate()
        process.wait(timeout=30)
    key = banner[2].strip().removeprefix("MARITIME_API_KEY=")
    assert key.startswith("isk_") and (tmp_path / "s" / "api-key").read_text().strip() == key
    assert "context: local (not the current one" in banner[4]
    contexts = load()
    assert contexts.current == "hosted"  # a server never takes over a chosen context
    assert contexts.contexts["local"].key == key
    assert contexts.contexts["local"].url == banner[0].split()[-1]


# the story of a new user


def test_a_new_user_runs_a_swarm_and_reads_why_sandboxes_failed(home: Path, tmp_path: Path) -> None:
    # shell one: a server, with nothing but defaults (and a state dir of the test's own)
    server = subprocess.Popen(
        [SCRIPT, "server", "--port", "0", "--state-dir", str(tmp_path / "state")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = [server.stdout.readline() for _ in range(5)]
        assert "context: local (current" in banner[4], banner
        # shell two: nothing exported
        assert "MARITIME_API_URL" not in os.environ
        command = "exit $((MARITIME_SWARM_INDEX % 2))"
        waited = run("swarms", "run", "--count", "5", "--command", command, "--wait")
        assert waited.returncode == 1, waited.stderr
        lines = waited.stdout.splitlines()
        assert lines[0] == "completed: 3 succeeded, 2 failed, 0 cancelled"
        failed = [line for line in lines if line.startswith("sandbox ")]
        assert [line.split()[1] for line in failed] == ["1", "3"]
        assert all(line.endswith("failed: exit code 1") for line in failed)
        run_id = waited.stderr.split()[3]
        assert lines[-1] == f"see more: inspect-swarm swarms logs {run_id[:12]} 1"
        assert f"{run_id[:12]} completed, 5 sandboxes: 5 done" in waited.stderr

        # `swarms list` on a terminal: a table whose ids other commands take
        listed = on_terminal("swarms", "list")
        header, row = listed.stdout.splitlines()[:2]
        assert header.split() == ["ID", "NAME", "STATUS", "DONE", "SUCCEEDED", "FAILED", "CREATED"]
        prefix = row.split()[0]
        assert run_id.startswith(prefix) and len(prefix) < len(run_id)
        logs = run("swarms", "logs", prefix)
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.count("==> sandbox ") == 5
        sandbox = failed[0].split()[2][1:-1]
        assert f"==> sandbox 1 ({sandbox}, failed: exit code 1): no output <==" in logs.stdout
        again = run("swarms", "wait", prefix[:6])
        assert again.returncode == 1 and again.stdout == waited.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


# ids


def test_every_command_takes_an_id_prefix_and_list_prints_ids_they_take(local: Server) -> None:
    started = run("swarms", "run", "--count", "2", "--size", "1x1", "--command", "echo hi")
    run_id = started.stdout.strip()
    assert started.returncode == 0 and re.fullmatch(r"[0-9a-f]{32}", run_id), started
    prefix = run_id[:7]
    waited = run("swarms", "wait", prefix, "--poll-interval", "0.1")
    assert waited.returncode == 0 and "2 succeeded" in waited.stdout
    piped = run("swarms", "list").stdout.splitlines()
    assert any(line.split("\t")[0] == run_id for line in piped)
    for line in piped:
        assert run("swarms", "get", line.split("\t")[0]).returncode == 0
    assert json.loads(run("swarms", "get", prefix, "--json").stdout)["id"] == run_id
    results = run("swarms", "results", prefix, "--json").stdout.splitlines()
    assert [json.loads(line)["stdoutTail"] for line in results] == ["hi\n", "hi\n"]
    assert run("swarms", "cancel", prefix).stdout.startswith(run_id)
    sandbox = json.loads(results[0])["sandboxId"]
    got = run("sandboxes", "get", sandbox[:7], "--json")
    assert json.loads(got.stdout)["sandboxId"] == sandbox, got.stderr
    missing = run("swarms", "get", "zzz")
    assert missing.returncode == 1 and "no swarm run 'zzz'" in missing.stderr


# following a run


def test_progress_adds_up_and_logs_show_each_sandbox(local: Server, tmp_path: Path) -> None:
    command = 'echo "out $MARITIME_SWARM_INDEX"; echo "err $MARITIME_SWARM_INDEX" >&2; sleep 0.3'
    waited = run(
        "swarms", "run", "--count", "3", "--concurrency", "1", "--size", "1x1",
        "--command", command, "--wait", "--poll-interval", "0.05", "-o", str(tmp_path / "r"),
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    progress = [line for line in waited.stderr.splitlines() if "3 sandboxes: " in line]
    seen = set()
    for line in progress:
        parts = line.split("3 sandboxes: ")[1].split(" (")[0].split(", ")
        counts = {p.split()[1]: int(p.split()[0]) for p in parts}
        seen |= set(counts)
        assert sum(counts.values()) == 3, line
    assert {"queued", "done"} <= seen and seen & {"booting", "running"}
    assert len((tmp_path / "r").read_text().splitlines()) == 3
    run_id = waited.stderr.split()[3]
    one = run("swarms", "logs", run_id, "2")
    assert (one.stdout, one.stderr) == ("out 2\n", "err 2\n")
    every = run("swarms", "logs", run_id).stdout
    assert every.count("==>") == 6 and "stderr <==\nerr 0\n" in every
    as_json = json.loads(run("swarms", "logs", run_id, "1", "--json").stdout)
    assert (as_json["index"], as_json["stdoutTail"]) == (1, "out 1\n")
    nowhere = run("swarms", "logs", run_id, "7")
    assert nowhere.returncode == 1 and "0 to 2" in nowhere.stderr


def test_a_failed_sandbox_is_explained(local: Server) -> None:
    command = 'for i in 1 2 3 4 5; do echo "line $i" >&2; done; exit 3'
    waited = run(
        "swarms", "run", "--count", "1", "--size", "1x1", "--command", command, "--wait",
        "--poll-interval", "0.1",
    )  # fmt: skip
    assert waited.returncode == 1
    assert waited.stdout.splitlines()[1:5] == [
        f"sandbox 0 ({waited.stdout.split()[9][1:-1]}) failed: exit code 3",
        "    line 3",
        "    line 4",
        "    line 5",
    ]
    timed = run(
        "swarms", "run", "--count", "1", "--size", "1x1", "--command", "sleep 30",
        "--timeout", "1", "--wait", "--poll-interval", "0.1",
    )  # fmt: skip
    assert timed.returncode == 1 and "failed: timeout after 1s" in timed.stdout


def test_run_takes_every_field_of_a_start(local: Server) -> None:
    done = run(
        "swarms", "run", "--count", "1", "--size", "1x1", "--command", 'cat /in > /out; echo "$A"',
        "--files", "/in=from a file", "--env", "A=set", "--result-path", "/out",
        "--idempotency-key", "cli-fields", "--name", "fields", "--wait", "--json",
        "--poll-interval", "0.1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    finished = json.loads(done.stdout)
    assert finished["name"] == "fields" and finished["resultPath"] == "/out"
    (sandbox,) = finished["sandboxes"]
    assert (sandbox["result"], sandbox["stdoutTail"]) == ("from a file", "set\n")
    # the same key and body: the same run, not a new one
    again = run(
        "swarms", "run", "--count", "1", "--size", "1x1", "--command", 'cat /in > /out; echo "$A"',
        "--files", "/in=from a file", "--env", "A=set", "--result-path", "/out",
        "--idempotency-key", "cli-fields", "--name", "fields",
    )  # fmt: skip
    assert again.stdout.strip() == finished["id"]


def test_a_cancelled_run_says_cancelled_and_keeps_what_it_printed(local: Server) -> None:
    started = run("swarms", "run", "--count", "2", "--size", "1x1", "--command",
                  "echo before; sleep 60")  # fmt: skip
    run_id = started.stdout.strip()
    with SwarmsClient() as client:
        deadline = time.monotonic() + 60
        while client.swarms.get(run_id)["counts"]["running"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1)  # long enough for `echo` to have run
    assert run("swarms", "cancel", run_id).returncode == 0
    waited = run("swarms", "wait", run_id, "--poll-interval", "0.1")
    assert waited.returncode == 1
    assert waited.stdout.splitlines()[0] == "cancelled: 0 succeeded, 0 failed, 2 cancelled"
    assert "cancelled, 2 sandboxes: 2 done (2 cancelled)" in waited.stderr
    listed = run("swarms", "list").stdout.splitlines()
    assert [line.split("\t")[2] for line in listed if line.startswith(run_id)] == ["cancelled"]
    logs = run("swarms", "logs", run_id, "0")
    assert logs.stdout == "before\n"


# output


def test_tables_on_a_terminal_plain_text_in_a_pipe_and_json(local: Server) -> None:
    waited = run("swarms", "run", "--count", "2", "--size", "1x1", "--command",
                 "echo r > /r", "--result-path", "/r", "--wait", "--poll-interval", "0.1")  # fmt: skip
    run_id = waited.stderr.split()[3]
    sandbox = run("sandboxes", "create", "--size", "1x1", "--metadata", "who=test").stdout.strip()
    try:
        headers = {
            ("swarms", "list"): "ID NAME STATUS DONE SUCCEEDED FAILED CREATED",
            ("swarms", "get", run_id): "INDEX SANDBOX STATUS OUTCOME TIME RESULT",
            ("swarms", "results", run_id): "INDEX SANDBOX STATUS OUTCOME TIME RESULT",
            ("sandboxes", "list"): "SANDBOX STATUS TEMPLATE SIZE STARTED ENDS",
        }
        for command, header in headers.items():
            shown = on_terminal(*command)
            assert shown.returncode == 0, shown.stderr
            assert header in [" ".join(line.split()) for line in shown.stdout.splitlines()]
            piped = run(*command).stdout
            assert header.split()[0] not in piped.split() and "\t" in piped
        fields = on_terminal("swarms", "get", run_id).stdout
        assert re.search(r"Status\s+completed", fields) and re.search(
            r"Size\s+1 vCPU, 1 GB", fields
        )
        got = on_terminal("sandboxes", "get", sandbox).stdout
        assert re.search(rf"ID\s+{sandbox}", got) and re.search(r"metadata who\s+test", got)
        assert f"id:\t{sandbox}" in run("sandboxes", "get", sandbox).stdout
        with SwarmsClient() as client:
            same = {
                ("swarms", "get", run_id): client.swarms.get(run_id),
                ("sandboxes", "get", sandbox): client.sandboxes.get(sandbox),
                ("sandboxes", "list"): client.sandboxes.list(),
            }
            for command, api in same.items():
                assert json.loads(run(*command, "--json").stdout) == api, command
            runs = json.loads(run("swarms", "list", "--json").stdout)
            assert [r["id"] for r in runs] == [r["id"] for r in client.swarms.list()]
    finally:
        killed = run("sandboxes", "kill", sandbox[:8])
    assert killed.stdout == f"{sandbox}\n"


def test_quiet_on_a_closed_pipe(local: Server) -> None:
    for command in (("swarms", "list"), ("--help",), ("context", "list")):
        process = subprocess.Popen([SCRIPT, *command], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()  # the reader is gone before the command writes
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) in (0, 141), stderr
        assert stderr == "", command


# the server's operations


def test_server_help_shows_every_default(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    shown = run("server", "--help", env=env)
    assert shown.returncode == 0
    text = re.sub(r"-\s+", "-", " ".join(shown.stdout.split()))  # as wrapped at hyphens
    assert "Run a swarm server on this machine" in text and "records them in your config" in text
    for default in ("(default: 8767)", "(default: 127.0.0.1)", "(default: auto)",
                    "(default: none)", "(default: 10m)", "(default: 15m)", "(default: 30s)",
                    "(default: 5000)", "(default: local)"):  # fmt: skip
        assert default in text, default
    # as computed (argparse wraps a long path anywhere)
    assert f"here{tmp_path / 'state' / 'inspect-swarm'})" in "".join(shown.stdout.split())
    assert re.search(r"3/4 of RAM, here \d+ GiB\)", text)
    assert "namespaces (Linux, as root), process" in text
    # every option has a line of help
    from inspect_swarm.cli._main import build_parser

    commands = next(a for a in build_parser()._actions if a.choices)
    server = commands.choices["server"]  # type: ignore[index]
    for action in server._actions:
        assert action.help and action.option_strings[-1] in shown.stdout, action


def test_server_logs_requests_and_runs(tmp_path: Path) -> None:
    server = start_server(tmp_path / "state", "--isolation", "process", "-v")
    try:
        with server.client() as client:
            run_id = client.swarms.start("true", count=1, size="1x1")["id"]
            client.swarms.wait(run_id, timeout=60)
        with server.http("wrong") as http:
            http.get("/api/swarms?token=secret")
    finally:
        server.kill()
    log = (tmp_path / "state.log").read_text()
    account = re.search(r"POST /api/swarms 201 [\d.]+ms (acct_\w+)\n", log)
    assert account, log
    assert re.search(rf"GET /api/swarms/{run_id} 200 [\d.]+ms {account[1]}\n", log)
    assert re.search(r"GET /api/swarms 401 [\d.]+ms -\n", log)
    assert f"run {run_id} started by {account[1]}: 1 sandboxes" in log
    assert f"run {run_id} completed: 1 succeeded, 0 failed, 0 cancelled" in log
    logged = "\n".join(line for line in log.splitlines() if " INFO " in line)  # not the banner
    assert KEY not in logged and "wrong" not in logged and "secret" not in logged
