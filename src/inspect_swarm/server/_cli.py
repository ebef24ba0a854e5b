"""The `inspect-swarm` command: `server`, `swarms ...`, `sandboxes ...` and `mcp`."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ._client import SwarmsAPIError, SwarmsClient, parse_size

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Seconds from `600`, `90s`, `10m` or `1h30m`."""
    if text.isdigit():
        return int(text)
    match = _DURATION.match(text)
    if not text or match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(
            f"expected seconds or a duration such as 90s, 10m or 1h30m, got {text!r}"
        )
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _size(text: str) -> dict[str, int]:
    try:
        size = parse_size(text)
    except ValueError as ex:
        raise argparse.ArgumentTypeError(str(ex).removeprefix("size: ")) from None
    assert size is not None
    return size


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of GiB, 0 or more, got {text!r}")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def read_inputs(path: Path) -> list[dict[str, Any]]:
    """One sandbox's `{args, env, files}` per line of a JSONL file (blank lines skipped)."""
    inputs: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as ex:
            raise ValueError(f"--inputs {path}: line {number} is not JSON ({ex})") from None
        if not isinstance(item, dict) or not set(item) <= {"args", "env", "files"}:
            raise ValueError(
                f"--inputs {path}: line {number} must be an object with args, env and files"
            )
        inputs.append(item)
    if not inputs:
        raise ValueError(f"--inputs {path}: the file has no inputs")
    return inputs


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `inspect-swarm`."""
    parser = argparse.ArgumentParser(
        prog="inspect-swarm", description="Swarm server, Swarms API client and MCP tools."
    )
    parser.add_argument("--api-url", help="API address (default: MARITIME_API_URL)")
    parser.add_argument("--api-key", dest="client_key", help="API key (MARITIME_API_KEY)")
    commands = parser.add_subparsers(dest="command", required=True)
    _server_parser(commands.add_parser("server", help="run a swarm server on this machine"))
    _swarms_parser(commands.add_parser("swarms", help="start and follow swarm runs"))
    _sandboxes_parser(
        commands.add_parser("sandboxes", help="long-lived sandboxes on your swarm server")
    )
    mcp = commands.add_parser("mcp", help="serve the Swarms API as MCP tools (stdio)")
    mcp.add_argument(
        "--names",
        choices=["cli", "hosted", "both"],
        default="cli",
        help="tool names: cli (swarms_run...), hosted (start_swarm...) or both",
    )
    return parser


def _server_parser(server: argparse.ArgumentParser) -> None:
    add = server.add_argument
    add("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    add("--port", type=int, default=8767, help="port (0: any free port)")
    add(
        "--api-key",
        dest="api_keys",
        action="append",
        default=[],
        metavar="KEY[:SCOPES]",
        help="an accepted key, one account each (repeatable; scopes read,provision)",
    )
    add("--memory-gib", type=int, help="memory to book sandboxes in (default: 3/4 of RAM)")
    add("--state-dir", type=Path, help="database and sandboxes (default: ~/.local/state)")
    add("--max-sandboxes", type=int, default=5000, help="most sandboxes in one run")
    add("--max-body-mib", type=_positive, default=16, help="largest request body (not uploads)")
    add(
        "--max-file-mib",
        type=_positive,
        default=256,
        help="largest file (or command input) sent to, or file read from, a sandbox's E2B daemon",
    )
    add(
        "--read-timeout",
        type=parse_duration,
        default=30,
        help="close a connection whose request head takes, or body pauses, this long",
    )
    add(
        "--max-connections",
        type=_positive,
        default=4096,
        help="open connections past which requests are answered 503",
    )
    add(
        "--max-sandbox-connections",
        type=_positive,
        default=128,
        help="connections one sandbox may hold open to the server",
    )
    add("--plan", choices=["scale", "none"], default="scale", help="none answers 402")
    add("--min-timeout", type=int, default=10, help="shortest timeoutSeconds accepted")
    add("--idle-release", type=parse_duration, default=600, help="free an idle lease after")
    add(
        "--stuck-timeout",
        type=parse_duration,
        default=900,
        help="fail queued sandboxes that cannot start for this long",
    )
    add(
        "--network",
        choices=["none", "host"],
        default="none",
        help="sandbox network: none (loopback only) or the host's",
    )
    add("--isolation", choices=["auto", "namespaces", "process"], default="auto")
    add("--mask", action="append", default=[], help="a host path hidden from sandboxes")
    add(
        "--share",
        action="append",
        default=[],
        metavar="DIR",
        help="a host directory mounted read-write at the same path in every sandbox "
        "(for example a log directory for sweeps)",
    )
    add(
        "--expose",
        action="append",
        default=[],
        metavar="HOST[:PATH]",
        help="a host path mounted read-only in every sandbox, at PATH or at its own path "
        "(repeatable; for example an interpreter's prefix)",
    )
    add(
        "--disk-gib",
        type=_non_negative,
        help="each sandbox's disk, what its writes may take (default: 12, or less on a "
        "small disk; 0: no quota)",
    )
    add(
        "--max-pids",
        type=_positive,
        help="the most processes of all sandboxes at once (default: 3/4 of the kernel's)",
    )
    add(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="where sandboxes run: this machine, or the nodes of a Ray cluster (pip extra ray)",
    )
    add(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster's HOST:PORT (default: the cluster this machine is part of)",
    )
    add("--ready-file", type=Path, help="write {url, apiKey} here once listening")


def _swarms_parser(swarms: argparse.ArgumentParser) -> None:
    sub = swarms.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="start a run")
    run.add_argument("--command", required=True, help="the shell command of every sandbox")
    many = run.add_mutually_exclusive_group(required=True)
    many.add_argument("--count", type=int, help="how many sandboxes")
    many.add_argument("--inputs", type=Path, help="JSONL: one sandbox's args, env, files a line")
    run.add_argument("--size", type=_size, help="VCPUSxGB, such as 2x4 (the default)")
    run.add_argument("--timeout", type=parse_duration, help="per sandbox: 90s, 10m, 1h30m")
    run.add_argument("--concurrency", type=int, help="the most sandboxes at once")
    what = run.add_mutually_exclusive_group()
    what.add_argument("--template", help="sandbox template (default base)")
    what.add_argument("--image", help="OCI image reference")
    run.add_argument("--result-path", help="absolute path read back after the command")
    run.add_argument("--name", help="the run's name")
    run.add_argument("--env", type=_env_pair, action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("--idempotency-key", help="retry-safe key (default: a new one)")
    run.add_argument(
        "--wait", action="store_true", help="follow the run; exit 0 only if every sandbox succeeded"
    )
    run.add_argument("--poll-interval", type=float, default=3.0, help="seconds between polls")
    run.add_argument("-o", "--output", type=Path, help="with --wait: write results JSONL here")
    run.add_argument("--json", action="store_true", help="print the run as JSON")
    sub.add_parser("list", help="your runs, newest first").add_argument(
        "--json", action="store_true"
    )
    sub.add_parser("get", help="a run and its sandboxes").add_argument("swarm_id")
    results = sub.add_parser("results", help="results JSONL, one sandbox a line")
    results.add_argument("swarm_id")
    results.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    sub.add_parser("cancel", help="cancel a run").add_argument("swarm_id")


def _sandboxes_parser(sandboxes: argparse.ArgumentParser) -> None:
    sub = sandboxes.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="start a sandbox that lives until killed or timed out")
    create.add_argument("--template", help="sandbox template (default base)")
    create.add_argument("--size", type=_size, help="VCPUSxGB, such as 2x4 (the default)")
    create.add_argument("--timeout", type=parse_duration, help="its lifetime: 90s, 10m, 1h30m")
    create.add_argument("--env", type=_env_pair, action="append", default=[], metavar="NAME=VALUE")
    create.add_argument(
        "--metadata", type=_env_pair, action="append", default=[], metavar="KEY=VALUE"
    )
    sub.add_parser("list", help="your live sandboxes, newest first")
    sub.add_parser("get", help="a sandbox (a run's or a long-lived one)").add_argument("sandbox_id")
    sub.add_parser("kill", help="end a long-lived sandbox").add_argument("sandbox_id")


def progress_line(run: dict[str, Any]) -> str:
    """A one-line summary of a run's progress."""
    counts = run.get("counts") or {}
    parts = [f"{run.get('done', 0)}/{run.get('count', '?')} done"]
    parts += [
        f"{counts[s]} {s}"
        for s in ("running", "queued", "succeeded", "failed", "cancelled")
        if counts.get(s)
    ]
    if run.get("waitingReason"):
        parts.append(f"waiting: {run['waitingReason']}")
    return f"{run.get('id', '')[:12]} {run.get('status', '')}: " + ", ".join(parts)


class _Progress:
    """A live progress line on a terminal; one line per change elsewhere."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last = ""

    def __call__(self, run: dict[str, Any]) -> None:
        line = progress_line(run)
        if line == self._last:
            return
        self._last = line
        if self._stream.isatty():
            self._stream.write("\r\x1b[2K" + line)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def end(self) -> None:
        if self._stream.isatty() and self._last:
            self._stream.write("\n")


def _write_jsonl(rows: list[dict[str, Any]], path: Path | None) -> None:
    text = "".join(json.dumps(row) + "\n" for row in rows)
    if path is None:
        sys.stdout.write(text)
    else:
        path.write_text(text)


def _run(client: SwarmsClient, args: argparse.Namespace) -> int:
    inputs = read_inputs(args.inputs) if args.inputs is not None else None
    run = client.swarms.start(
        args.command,
        count=args.count,
        inputs=inputs,
        size=args.size,
        timeout_seconds=args.timeout,
        concurrency=args.concurrency,
        env=dict(args.env) or None,
        template=args.template,
        image=args.image,
        result_path=args.result_path,
        name=args.name,
        idempotency_key=args.idempotency_key,
    )
    print(json.dumps(run, indent=2) if args.json else f"started swarm run {run['id']}")
    if not args.wait:
        return 0
    progress = _Progress(sys.stderr)
    done = client.swarms.wait(run["id"], poll_interval=args.poll_interval, on_update=progress)
    progress.end()
    if args.output is not None:
        _write_jsonl(client.swarms.results(run["id"]), args.output)
    counts = done.get("counts") or {}
    print(
        f"{counts.get('succeeded', 0)} succeeded, {counts.get('failed', 0)} failed, "
        f"{counts.get('cancelled', 0)} cancelled"
    )
    return 0 if counts.get("succeeded") == done.get("count") else 1


def _swarms(args: argparse.Namespace) -> int:
    with SwarmsClient(api_key=args.client_key, base_url=args.api_url) as client:
        if args.action == "run":
            return _run(client, args)
        if args.action == "list":
            runs = client.swarms.list()
            for run in runs:
                print(json.dumps(run) if args.json else progress_line(run))
        elif args.action == "get":
            print(json.dumps(client.swarms.get(args.swarm_id), indent=2))
        elif args.action == "results":
            _write_jsonl(client.swarms.results(args.swarm_id), args.output)
        elif args.action == "cancel":
            print(progress_line(client.swarms.cancel(args.swarm_id)))
    return 0


def _sandboxes(args: argparse.Namespace) -> int:
    with SwarmsClient(api_key=args.client_key, base_url=args.api_url) as client:
        if args.action == "create":
            found: Any = client.sandboxes.create(
                template=args.template,
                size=args.size,
                timeout_seconds=args.timeout,
                env=dict(args.env) or None,
                metadata=dict(args.metadata) or None,
            )
        elif args.action == "list":
            found = client.sandboxes.list()
        elif args.action == "get":
            found = client.sandboxes.get(args.sandbox_id)
        else:
            found = client.sandboxes.kill(args.sandbox_id)
    print(json.dumps(found, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `inspect-swarm` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "server":
            from ._serve import ServerOptions, serve

            serve(
                ServerOptions(
                    host=args.host,
                    port=args.port,
                    api_keys=args.api_keys,
                    memory_gib=args.memory_gib,
                    state_dir=args.state_dir,
                    max_sandboxes=args.max_sandboxes,
                    max_body_mib=args.max_body_mib,
                    max_file_mib=args.max_file_mib,
                    read_timeout=args.read_timeout,
                    max_connections=args.max_connections,
                    max_sandbox_connections=args.max_sandbox_connections,
                    plan=args.plan,
                    min_timeout=args.min_timeout,
                    idle_release=args.idle_release,
                    stuck_timeout=args.stuck_timeout,
                    network=args.network,
                    isolation=args.isolation,
                    masks=tuple(args.mask),
                    shares=tuple(args.share),
                    ready_file=args.ready_file,
                    exposes=tuple(args.expose),
                    disk_gib=args.disk_gib,
                    max_pids=args.max_pids,
                    engine=args.engine,
                    ray_address=args.ray_address,
                )
            )
            return 0
        if args.command == "mcp":
            from ._mcp import serve_mcp

            serve_mcp(api_key=args.client_key, base_url=args.api_url, names=args.names)
            return 0
        if args.command == "sandboxes":
            return _sandboxes(args)
        return _swarms(args)
    except (SwarmsAPIError, ValueError, OSError) as ex:
        print(f"inspect-swarm: error: {ex}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
