"""The CLI, the client and the server start without inspect_ai, and `import inspect_swarm` keeps
its public API for code and for type checkers alike."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import inspect_swarm
import inspect_swarm.analysis
import inspect_swarm.client
from inspect_swarm.server._defaults import KEYS_VARIABLE

from ..servers import KEY, Server, run_script, start_server

ROOT = Path(__file__).parents[2]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}},
}


def imported(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> set[str]:
    """The modules `inspect-swarm ARGS` imports (from Python's own import-time report)."""
    report = {**os.environ, **(env or {}), "PYTHONPROFILEIMPORTTIME": "1"}
    done = run_script(*args, stdin=stdin, env=report)
    assert done.returncode == 0, done.stderr[-2000:]
    return _modules(done.stderr)


def _modules(report: str) -> set[str]:
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)", report, re.M))


def test_the_cli_and_client_paths_do_not_import_inspect_ai(server: Server, tmp_path: Path) -> None:
    env = {"MARITIME_API_URL": server.url, "MARITIME_API_KEY": KEY}
    mcp = (
        json.dumps(INITIALIZE)
        + "\n"
        + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    )
    paths = {
        "help": imported("--help"),
        "swarms list": imported("swarms", "list", env=env),
        "sandboxes list": imported("sandboxes", "list", env=env),
        "context list": imported("context", "list"),
        "mcp": imported("mcp", stdin=mcp + "\n", env=env),
    }
    for path, modules in paths.items():
        assert "inspect_swarm.cli._main" in modules, path  # the report is complete
        assert not {m for m in modules if m.split(".")[0] == "inspect_ai"}, path
    assert "httpx" in paths["swarms list"] and "httpx" not in paths["help"]
    assert "mcp" not in paths["mcp"]  # the MCP server speaks the protocol itself


def test_the_server_path_does_not_import_inspect_ai(tmp_path: Path) -> None:
    server = start_server(
        tmp_path / "state", "--isolation", "process", env={"PYTHONPROFILEIMPORTTIME": "1"}
    )
    try:
        with server.client() as client:
            run = client.swarms.start("true", count=1, size="1x1")
            client.swarms.wait(run["id"], timeout=60)
    finally:
        server.kill()
    modules = _modules((tmp_path / "state.log").read_text())
    assert {"inspect_swarm.server._serve", "inspect_swarm.server.engines._engine"} <= modules
    assert not {m for m in modules if m.split(".")[0] == "inspect_ai"}


def test_import_inspect_swarm_loads_names_on_first_use() -> None:
    code = (
        "import sys, inspect_swarm\n"
        "assert 'inspect_ai' not in sys.modules\n"
        "assert inspect_swarm.swarm.__module__ == 'inspect_swarm._swarm'\n"
        "assert 'inspect_ai' in sys.modules\n"
        "from inspect_swarm import *\n"
        "print(sorted(n for n in inspect_swarm.__all__ if n not in globals()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


@pytest.mark.parametrize(
    "package",
    [inspect_swarm, inspect_swarm.analysis, inspect_swarm.client],
    ids=lambda p: p.__name__,
)
def test_the_stub_is_the_public_api(package: object) -> None:
    stub = Path(package.__file__).with_suffix(".pyi")  # type: ignore[attr-defined]
    tree = ast.parse(stub.read_text())
    imported_names = {
        alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    [listed] = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "__all__"  # type: ignore[attr-defined]
    ]
    assert imported_names == set(listed) == set(package.__all__)  # type: ignore[attr-defined]
    for name in listed:
        assert getattr(package, name) is not None
        assert name in dir(package)


def test_type_checkers_see_every_public_name() -> None:
    # mypy checks the file in scripts/test: here, that it names every public name and keeps
    # the mistakes mypy must find
    source = (ROOT / "tests" / "typecheck" / "public_names.py").read_text()
    imported = {
        node.module: {alias.name for alias in node.names}
        for node in ast.parse(source).body
        if isinstance(node, ast.ImportFrom)
    }
    assert imported == {
        "inspect_swarm": set(inspect_swarm.__all__),
        "inspect_swarm.client": set(inspect_swarm.client.__all__),
    }
    ignored = re.findall(r"^(\w+)(?:: \w+)? = .*# type: ignore\[([a-z-]+)\]$", source, re.M)
    assert ignored == [
        ("wrong_count", "assignment"),
        ("wrong_call", "arg-type"),
        ("wrong_url", "assignment"),
    ]
    assert "mypy" in (ROOT / "scripts" / "test").read_text()


def _log(server: Server) -> str:
    return (server.state_dir.parent / f"{server.state_dir.name}.log").read_text()


def test_keys_from_a_file_and_the_environment_stay_off_the_command_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# one account a line\nfile-key\n\nfile-reader:read\n")
    keys.chmod(0o600)
    server = start_server(
        tmp_path / "state",
        "--api-key-file",
        str(keys),
        keys=(),
        env={KEYS_VARIABLE: "env-key env-reader:read"},
    )
    try:
        for key in ("file-key", "env-key", "file-reader", "env-reader"):
            with server.client(key) as client:
                assert client.swarms.list() == []
        with server.http("file-reader") as http:
            assert http.post("/api/swarms", json={"command": "true", "count": 1}).status_code == 403
        with server.http("file-key") as http:
            assert http.get("/api/swarms").status_code == 200
        # none of the keys is on the command line, and no warning says so
        assert "file-key" not in " ".join(server.process.args)  # type: ignore[arg-type]
        assert "every local user" not in _log(server)
    finally:
        server.kill()


def test_a_key_on_the_command_line_warns_that_others_can_read_it(tmp_path: Path) -> None:
    server = start_server(tmp_path / "state", keys=(KEY,))
    try:
        assert "every local user can read it (/proc/PID/cmdline)" in _log(server)
    finally:
        server.kill()


def test_a_key_file_others_may_write_or_without_keys_is_refused(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    state = ["--state-dir", str(tmp_path / "state"), "--port", "0", "--no-context"]
    keys.write_text("a-key\n")
    keys.chmod(0o620)
    refused = run_script("server", "--api-key-file", str(keys), *state)
    assert refused.returncode == 1
    assert f"{str(keys)!r} may be written by others" in refused.stderr
    assert f"chmod go-w {keys}" in refused.stderr
    keys.chmod(0o600)
    keys.write_text("# no key\n\n")
    refused = run_script("server", "--api-key-file", str(keys), *state)
    assert refused.returncode == 1
    assert "holds no key" in refused.stderr
