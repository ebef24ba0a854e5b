"""The CLI's client commands: `swarms ...`, `sandboxes ...`, `accounts ...`, `mcp`, `login` and
`context ...`.

Each takes the parsed arguments and returns the exit status. Data goes to stdout (see
`cli._output`), progress and hints to stderr. An API error names the server that answered it and
where that choice came from.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from .._swarms_api import QUOTA_WIRE, SANDBOX_FIELDS, START_FIELDS
from ..client import _contexts as _config
from ..client._client import (
    APIConnectionError,
    AuthenticationError,
    SwarmsAPIError,
    SwarmsClient,
    is_finished,
)
from ..client._contexts import CLI, Context, Target, resolve
from ._options import field_values
from ._output import (
    Output,
    accounts_table,
    logs,
    long_lived_table,
    progress_line,
    run_fields,
    runs_table,
    sandbox_fields,
    sandboxes_table,
    summary,
)

_CHOOSE = "choose another with --api-url URL, --context NAME or `inspect-swarm context use NAME`"


def _target(args: argparse.Namespace) -> Target:
    target = resolve(args.api_url, args.client_key, args.context, CLI)
    if args.verbose:
        print(f"inspect-swarm: talking to {target.describe()}", file=sys.stderr)
    return target


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[SwarmsClient]:
    """A client of the server the arguments choose; its errors say which server that is."""
    target = _target(args)
    try:
        with SwarmsClient(api_key=target.key, base_url=target.url) as client:
            yield client
    except SwarmsAPIError as ex:
        where = f"server: {target.describe()}"
        if isinstance(ex, APIConnectionError | AuthenticationError):
            where += f"; {_CHOOSE}"
        raise ValueError(f"{ex}\n  {where}") from None


# swarms


def swarms_run(args: argparse.Namespace) -> int:
    """`swarms run`."""
    output = Output(args.json)
    with _client(args) as client:
        options = field_values(args, START_FIELDS)
        run = client.swarms.start(options.pop("command"), **options)
        if args.wait:
            print(f"started swarm run {run['id']}", file=sys.stderr)
            return _follow(client, run["id"], args, output)
    if output.as_json:
        output.json(run)
        return 0
    output.line(run["id"])
    if output.terminal:
        print(f"follow it: inspect-swarm swarms wait {run['id'][:12]}", file=sys.stderr)
    return 0


def swarms_wait(args: argparse.Namespace) -> int:
    """`swarms wait`."""
    with _client(args) as client:
        return _follow(client, args.swarm_id, args, Output(args.json))


def _follow(client: SwarmsClient, run_id: str, args: argparse.Namespace, output: Output) -> int:
    """Show the run's progress until it ends, then what failed; 0 if every sandbox succeeded."""
    progress = _Progress(sys.stderr)
    try:
        done = client.swarms.wait(run_id, poll_interval=args.poll_interval, on_update=progress)
    except KeyboardInterrupt:
        progress.end()
        print(
            f"stopped following; the run goes on: inspect-swarm swarms wait {run_id[:12]}",
            file=sys.stderr,
        )
        return 130
    progress.end()
    if args.output is not None:
        _write_jsonl(client.swarms.results(done["id"]), args.output)
    if output.as_json:
        output.json(done)
    else:
        for line in summary(done, done["id"][:12]):
            output.line(line)
    counts = done.get("counts") or {}
    return 0 if counts.get("succeeded") == done.get("count") else 1


class _Progress:
    """The run's progress line: redrawn in place on a terminal, a line per change elsewhere."""

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


def _show(
    args: argparse.Namespace,
    fetch: Callable[[SwarmsClient], Any],
    render: Callable[[Output, Any], None],
) -> int:
    """Fetch data from the server, then print it: as the API's JSON with `--json`, else with
    `render`."""
    output = Output(args.json)
    with _client(args) as client:
        data = fetch(client)
    if output.as_json:
        output.json(data)
    else:
        render(output, data)
    return 0


def swarms_list(args: argparse.Namespace) -> int:
    """`swarms list`."""
    return _show(args, lambda client: client.swarms.list(), runs_table)


def swarms_get(args: argparse.Namespace) -> int:
    """`swarms get`."""
    return _show(args, lambda client: client.swarms.get(args.swarm_id), run_fields)


def swarms_logs(args: argparse.Namespace) -> int:
    """`swarms logs`: every sandbox's tails under headers, or one sandbox's as its own."""
    output = Output(args.json)
    with _client(args) as client:
        run = client.swarms.get(args.swarm_id)
    sandboxes = run.get("sandboxes") or []
    if args.index is None:
        if output.as_json:
            output.json(sandboxes)
        else:
            logs(output, sandboxes)
        return 0
    sandbox = _sandbox_at(sandboxes, args.index, run["id"])
    if output.as_json:
        output.json(sandbox)
        return 0
    sys.stdout.write(sandbox.get("stdoutTail") or "")
    sys.stdout.flush()
    sys.stderr.write(sandbox.get("stderrTail") or "")
    return 0


def _sandbox_at(sandboxes: list[dict[str, Any]], index: int, run_id: str) -> dict[str, Any]:
    for sandbox in sandboxes:
        if sandbox.get("index") == index:
            return sandbox
    raise ValueError(
        f"swarms logs: run {run_id} has no sandbox {index}; its indexes are 0 to "
        f"{len(sandboxes) - 1}"
    )


def swarms_results(args: argparse.Namespace) -> int:
    """`swarms results`."""
    output = Output(args.json)
    with _client(args) as client:
        results = client.swarms.results(args.swarm_id)
    if args.output is not None or output.as_json:
        _write_jsonl(results, args.output)
    else:
        sandboxes_table(output, results)
    return 0


def swarms_cancel(args: argparse.Namespace) -> int:
    """`swarms cancel`: the run's progress as the cancel left it."""

    def render(output: Output, run: dict[str, Any]) -> None:
        status = None if is_finished(run) else "cancelling"
        output.line(progress_line(run, short=False, status=status))

    return _show(args, lambda client: client.swarms.cancel(args.swarm_id), render)


# sandboxes


def sandboxes_create(args: argparse.Namespace) -> int:
    """`sandboxes create`: prints the new sandbox's id (all of it with --json)."""

    def create(client: SwarmsClient) -> dict[str, Any]:
        return client.sandboxes.create(**field_values(args, SANDBOX_FIELDS))

    return _show(args, create, _sandbox_id)


def _sandbox_id(output: Output, box: Mapping[str, Any]) -> None:
    output.line(str(box["sandboxId"]))


def sandboxes_list(args: argparse.Namespace) -> int:
    """`sandboxes list`."""
    return _show(args, lambda client: client.sandboxes.list(), long_lived_table)


def sandboxes_get(args: argparse.Namespace) -> int:
    """`sandboxes get`."""
    return _show(args, lambda client: client.sandboxes.get(args.sandbox_id), sandbox_fields)


def sandboxes_kill(args: argparse.Namespace) -> int:
    """`sandboxes kill`: prints the ended sandbox's id (its record with --json)."""
    return _show(args, lambda client: client.sandboxes.kill(args.sandbox_id), _sandbox_id)


# accounts


def accounts_add(args: argparse.Namespace) -> int:
    """`accounts add`: prints the new account's key (shown this once; all of it with --json)."""
    scopes = None if args.scopes is None else args.scopes.split(",")

    def add(client: SwarmsClient) -> dict[str, Any]:
        return client.accounts.add(args.name, scopes=scopes, **_quotas(args))

    return _show(args, add, _account_key)


def _quotas(args: argparse.Namespace) -> dict[str, Any]:
    """The quotas given as flags, by their Python names."""
    return {name: getattr(args, name) for name in QUOTA_WIRE if getattr(args, name) is not None}


def _account_key(output: Output, account: Mapping[str, Any]) -> None:
    output.line(str(account["apiKey"]))


def accounts_list(args: argparse.Namespace) -> int:
    """`accounts list`."""
    return _show(args, lambda client: client.accounts.list(), accounts_table)


def accounts_rotate(args: argparse.Namespace) -> int:
    """`accounts rotate`: prints the account's new key."""
    return _show(args, lambda client: client.accounts.rotate(args.name), _account_key)


def accounts_set(args: argparse.Namespace) -> int:
    """`accounts set`: the account's own quotas."""

    def set_quotas(client: SwarmsClient) -> dict[str, Any]:
        given = {name: value or None for name, value in _quotas(args).items()}  # 0: the default
        return client.accounts.set_quotas(args.name, **given)

    return _show(args, set_quotas, lambda output, account: accounts_table(output, [account]))


def accounts_remove(args: argparse.Namespace) -> int:
    """`accounts remove`: prints the removed account's name."""
    removed = lambda output, account: output.line(str(account["name"]))  # noqa: E731
    return _show(args, lambda client: client.accounts.remove(args.name), removed)


# mcp


def mcp(args: argparse.Namespace) -> int:
    """`mcp`: serve the tools over stdio until the client goes."""
    from ._mcp import serve_mcp

    target = _target(args)
    serve_mcp(api_key=target.key, base_url=target.url, names=args.names)
    return 0


# contexts


def login(args: argparse.Namespace) -> int:
    """`login`: check the key with the server, then record both as the current context."""
    url = args.url.rstrip("/")
    key = _read_key(args.key)
    target = Target(url, key, "--url")
    try:
        with SwarmsClient(api_key=key, base_url=url) as client:
            client.swarms.access()
    except SwarmsAPIError as ex:
        raise ValueError(f"login: {url} refused the key or could not be reached: {ex}") from None
    name = args.name or _name_for(target.url)
    _config.record(Context(name, url, key, "login"), make_current=True)
    print(f"logged in to {url}; context {name!r} is now the current one")
    _env_note()
    return 0


def _read_key(given: str | None) -> str:
    if given is not None and given != "-":
        return given
    if given == "-" or not sys.stdin.isatty():
        key = sys.stdin.readline().strip()
    else:
        key = getpass.getpass("API key (not shown): ").strip()
    if not key:
        raise ValueError("login: no API key given; pass --key KEY, or type or pipe it in")
    return key


def _name_for(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or url


def _env_note() -> None:
    if os.environ.get(_config.URL_VARIABLE):
        print(
            f"note: {_config.URL_VARIABLE} is set, and chooses the server before any context",
            file=sys.stderr,
        )


def context_list(args: argparse.Namespace) -> int:
    """`context list`."""
    output = Output(args.json)
    contexts = _config.public(_config.load())
    if output.as_json:
        output.json(contexts)
        return 0
    rows = [["*" if c["current"] else "", c["name"], c["url"], c["origin"]] for c in contexts]
    output.table(["CURRENT", "NAME", "URL", "RECORDED BY"], rows)
    _env_note()
    return 0


def context_use(args: argparse.Namespace) -> int:
    """`context use`."""
    contexts = _config.load()
    chosen = contexts.named(args.name)
    contexts.current = chosen.name
    _config.save(contexts)
    print(f"current context: {chosen.name} ({chosen.url})")
    _env_note()
    return 0


def context_remove(args: argparse.Namespace) -> int:
    """`context remove`."""
    contexts = _config.load()
    contexts.named(args.name)
    del contexts.contexts[args.name]
    if contexts.current == args.name:
        contexts.current = None
    _config.save(contexts)
    print(f"removed context {args.name}")
    return 0
