"""How fast `inspect-swarm` starts (never run as tests).

    .venv/bin/python benchmarks/cli_startup.py [--runs 21]

Each command runs `--runs` times as a user runs it, the console script in a process of its
own, against a real server on loopback (started here, with `--no-context`): in a pipe, and the
listings also with stdout on a terminal (a pty, where rich draws tables). `mcp` is timed until
it has answered `initialize` and `tools/list`, as an MCP client starts it. Reported: the median
and 90th percentile wall time, and the median as a multiple of `python -c pass` measured in the
same run (target: every command under 300 ms median). For scale, `import inspect_ai`, which
`import inspect_swarm` cost every command before.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import KEY, start_server

PYTHON = sys.executable
SCRIPT = str(Path(PYTHON).parent / "inspect-swarm")
TARGET_MS = 300.0
_MCP_SESSION = "".join(
    json.dumps(message) + "\n"
    for message in (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}},
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
)


def in_pipe(command: list[str], env: dict[str, str]) -> float:
    """Seconds for `command` to run to its end with its output in a pipe."""
    began = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - began


def on_terminal(command: list[str], env: dict[str, str]) -> float:
    """Seconds for `command` to run to its end with its stdout on a terminal."""
    controller, terminal = pty.openpty()
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=terminal, stdin=subprocess.DEVNULL)
    os.close(terminal)
    while True:
        try:
            if not os.read(controller, 65536):
                break
        except OSError:
            break
    code = process.wait()
    elapsed = time.perf_counter() - began
    os.close(controller)
    assert code == 0, command
    return elapsed


def mcp_ready(env: dict[str, str]) -> float:
    """Seconds from starting `inspect-swarm mcp` to its answers to initialize and tools/list."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [SCRIPT, "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(_MCP_SESSION)
    process.stdin.flush()
    for _ in range(2):
        assert "result" in json.loads(process.stdout.readline())
    elapsed = time.perf_counter() - began
    process.stdin.close()
    process.wait()
    return elapsed


def measure(runs: int, once: Callable[[], float]) -> list[float]:
    once()  # warm the page cache and the bytecode
    return [once() for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = start_server(Path(folder) / "state", "--isolation", "process")
        env = {
            **os.environ,
            "MARITIME_API_URL": server.url,
            "MARITIME_API_KEY": KEY,
            "XDG_CONFIG_HOME": str(Path(folder) / "config"),
        }
        try:
            with server.client() as client:
                run = client.swarms.start("echo hi", count=3, size="1x1")
                client.swarms.wait(run["id"], timeout=60)
            prefix = run["id"][:8]
            cases: dict[str, Callable[[], float]] = {
                "python -c pass": lambda: in_pipe([PYTHON, "-c", "pass"], env),
                "python -c 'import inspect_ai'": lambda: in_pipe(
                    [PYTHON, "-c", "import inspect_ai"], env
                ),
                "inspect-swarm --help": lambda: in_pipe([SCRIPT, "--help"], env),
                "inspect-swarm --version": lambda: in_pipe([SCRIPT, "--version"], env),
                "swarms list": lambda: in_pipe([SCRIPT, "swarms", "list"], env),
                "swarms list (terminal)": lambda: on_terminal([SCRIPT, "swarms", "list"], env),
                "swarms get ID": lambda: in_pipe([SCRIPT, "swarms", "get", prefix], env),
                "swarms get ID (terminal)": lambda: on_terminal(
                    [SCRIPT, "swarms", "get", prefix], env
                ),
                "swarms logs ID": lambda: in_pipe([SCRIPT, "swarms", "logs", prefix], env),
                "swarms wait ID": lambda: in_pipe([SCRIPT, "swarms", "wait", prefix], env),
                "sandboxes list": lambda: in_pipe([SCRIPT, "sandboxes", "list"], env),
                "context list": lambda: in_pipe([SCRIPT, "context", "list"], env),
                "mcp (initialize, tools/list)": lambda: mcp_ready(env),
            }
            results = {name: measure(options.runs, once) for name, once in cases.items()}
        finally:
            server.kill()
    base = statistics.median(results["python -c pass"])
    print(f"{'command':34} {'median':>9} {'p90':>9} {'x pass':>8}")
    for name, times in results.items():
        median = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        over = "" if median * 1000 < TARGET_MS or "python" in name else "  over target"
        print(f"{name:34} {median * 1000:7.0f}ms {p90 * 1000:7.0f}ms {median / base:8.1f}{over}")
    print(f"(median of {options.runs} runs each; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
