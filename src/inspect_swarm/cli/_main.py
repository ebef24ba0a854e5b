"""The `inspect-swarm` command: `server`, `swarms ...`, `sandboxes ...`, `mcp`, `login` and
`context`, and `show` and `plot` for Inspect logs (`cli._logs`) and `replay` (`cli._replay`).

A command line is started again and again, by people and by scripts, so this module imports
nothing heavy: each command imports what it needs when it runs (the client httpx, the server
its web stack, a terminal's tables rich), and no path imports inspect_ai. Options that choose
the server (`--api-url`, `--api-key`, `--context`, `-v`) are taken before or after the
command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, get_args

from .._swarms_api import ACCOUNT_SCOPES, QUOTA_HELP, SANDBOX_FIELDS, START_FIELDS
from ..client._contexts import HOSTED_API_URL, LOCAL
from ..server._defaults import (
    DEFAULT_PORT,
    KEYS_VARIABLE,
    SERVER_DEFAULTS,
    NetworkMode,
    ServerOptions,
    default_console_port,
    default_memory_gib,
    default_state_dir,
)
from ._logs import add_log_commands
from ._options import (
    add_field_options,
    duration_text,
    non_negative,
    parse_duration,
    port,
    positive,
    whole,
)
from ._replay import add_replay_command

_SIGPIPE_EXIT = 141
"""The exit status of a command whose reader went away, as if SIGPIPE had ended it."""


class _Help(argparse.RawDescriptionHelpFormatter):
    """Help that keeps descriptions as written and shows each option's default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, False, [], argparse.SUPPRESS):
            return text
        if action.type is parse_duration:
            default = duration_text(default)
        return f"{text} (default: {default})"


def _parser(commands: Any, name: str, text: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand whose help shows its defaults, described by its one-line `text`."""
    kwargs.setdefault("description", text[0].upper() + text[1:] + ".")
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=text, formatter_class=_Help, **kwargs
    )
    return parser


def _client_options(top: bool) -> argparse.ArgumentParser:
    """The options that choose the server, taken before or after a command: the top level
    sets their defaults, and a command's own copy sets only what is given after it."""
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("choosing the server")
    unset: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    group.add_argument(
        "--api-url",
        metavar="URL",
        help="the server's URL (default: MARITIME_API_URL, else the context's)",
        **unset,
    )
    group.add_argument(
        "--api-key",
        dest="client_key",
        metavar="KEY",
        help="its API key (default: MARITIME_API_KEY, else the context's)",
        **unset,
    )
    group.add_argument(
        "--context",
        metavar="NAME",
        help="a context recorded by `server` or `login`, by name",
        **unset,
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        help="say which server the command talks to, and why",
        **({"default": 0} if top else unset),
    )
    return options


class _Version(argparse.Action):
    """`--version`, read from the installed package only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version

        print(f"inspect-swarm {version('inspect_swarm')}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `inspect-swarm`."""
    parser = argparse.ArgumentParser(
        prog="inspect-swarm",
        description=_DESCRIPTION,
        formatter_class=_Help,
        parents=[_client_options(top=True)],
    )
    parser.add_argument("--version", action=_Version)
    parser.set_defaults(help_of=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _server_parser(
        _parser(
            commands,
            "server",
            "run a swarm server on this machine",
            description=_SERVER_DESCRIPTION,
        )
    )
    client = [_client_options(top=False)]
    _swarms_parser(_parser(commands, "swarms", "start and follow swarm runs"), client)
    _sandboxes_parser(
        _parser(commands, "sandboxes", "long-lived sandboxes, and any sandbox's record"), client
    )
    _accounts_parser(
        _parser(commands, "accounts", "a server's accounts (with a key of the admin scope)"),
        client,
    )
    mcp = _parser(commands, "mcp", "serve the Swarms API as MCP tools over stdio", parents=client)
    mcp.add_argument(
        "--names",
        choices=["cli", "hosted", "both"],
        default="cli",
        help="tool names: cli (swarms_run...), hosted (start_swarm...) or both",
    )
    mcp.set_defaults(handler="mcp")
    _login_parser(_parser(commands, "login", "record a server's URL and key as a context"))
    _context_parser(_parser(commands, "context", "list the recorded servers and choose one"))
    add_log_commands(lambda name, text, **kwargs: _parser(commands, name, text, **kwargs))
    add_replay_command(lambda name, text, **kwargs: _parser(commands, name, text, **kwargs))
    return parser


_DESCRIPTION = """\
Run a swarm server, start and follow swarm runs on one, or serve them as MCP tools; show
and plot what the swarms in Inspect logs did, or replay them offline.

Client commands talk to the server that --api-url and --api-key give, else the one
MARITIME_API_URL and MARITIME_API_KEY give, else the current context's: the server that
`inspect-swarm server` started on this machine, or the last one `inspect-swarm login`
recorded (`inspect-swarm context list` shows them). -v says which one a command used.
"""

_SERVER_DESCRIPTION = """\
Run a swarm server on this machine, in the foreground until Ctrl-C or SIGTERM.

It serves the Swarms API (one command on many sandboxes at once) and E2B's, runs each
sandbox isolated (namespaces and cgroups as root on Linux), and keeps its runs in its state
directory. It prints its URL and key, and records them in your config as a context (`local`
unless --context says otherwise), so that the CLI and SwarmsClient() on this machine find it
with nothing exported. Its sandboxes end when it stops; queued ones resume when it restarts.
"""


def _server_parser(server: argparse.ArgumentParser) -> None:
    server.set_defaults(handler="server")

    def add(*flags: str, **kwargs: Any) -> None:
        # a server option's flag stores under the option's name, with the option's default
        action = server.add_argument(*flags, **kwargs)
        if action.dest in ServerOptions._fields and "default" not in kwargs:
            default = getattr(SERVER_DEFAULTS, action.dest)
            action.default = list(default) if isinstance(default, tuple) else default

    add("--host", help="address to listen on (loopback: this machine only)")
    add("--port", type=int, help="port to listen on (0: any free port)")
    add(
        "--api-key",
        dest="api_keys",
        action="append",
        metavar="KEY[:SCOPES]",
        help="an accepted key, one account each (repeatable; scopes from read,provision,admin, "
        "default read,provision; admin manages accounts; default: one made once and kept in "
        "the state directory, with every scope); every local user can read it in "
        f"/proc: prefer --api-key-file or ${KEYS_VARIABLE}",
    )
    add(
        "--api-key-file",
        metavar="FILE",
        type=Path,
        help="a file of accepted keys, one KEY[:SCOPES] a line, that no one else may write "
        f"(keys are also read from ${KEYS_VARIABLE}, separated by spaces)",
    )
    add(
        "--memory-gib",
        metavar="GIB",
        type=positive,
        help=f"memory sandboxes are booked against (default: 3/4 of RAM, here {default_memory_gib()} GiB)",
    )
    add(
        "--state-dir",
        metavar="DIR",
        type=Path,
        help="runs, keys and sandboxes (default: $XDG_STATE_HOME/inspect-swarm, else "
        f"~/.local/state/inspect-swarm; here {default_state_dir()})",
    )
    add("--max-sandboxes", type=positive, help="most sandboxes in one run")
    _quota_options(add, "")
    add("--max-body-mib", type=positive, help="largest request body (not uploads)")
    add(
        "--max-file-mib",
        type=positive,
        help="largest file (or command input) sent to, or file read from, a sandbox's E2B daemon",
    )
    add(
        "--read-timeout",
        metavar="DURATION",
        type=parse_duration,
        help="close a connection whose request head takes, or body pauses, this long",
    )
    add(
        "--min-body-rate",
        dest="min_body_kib",
        metavar="KIB",
        type=positive,
        help="slowest average rate of a request body, in KiB/s, after the read timeout's grace",
    )
    add(
        "--max-connections",
        type=positive,
        help="open connections past which requests are answered 503",
    )
    add(
        "--max-client-connections",
        type=positive,
        help="connections one client address may hold open (not counting sandboxes')",
    )
    add(
        "--max-sandbox-connections",
        type=positive,
        help="connections one sandbox may hold open to the server",
    )
    add(
        "--plan",
        choices=["scale", "none"],
        help="scale offers Swarms; none answers every start 402 plan_required",
    )
    add("--min-timeout", type=int, help="shortest timeoutSeconds accepted, in seconds")
    add(
        "--idle-release",
        metavar="DURATION",
        type=parse_duration,
        help="end a lease after this long with no sandbox running",
    )
    add(
        "--stuck-timeout",
        metavar="DURATION",
        type=parse_duration,
        help="fail queued sandboxes that cannot start for this long",
    )
    add(
        "--network",
        choices=get_args(NetworkMode),
        help="sandbox network: none (loopback only), nat (a way out through the server, "
        "under its rules) or the host's",
    )
    add(
        "--network-range",
        metavar="CIDR",
        help="the private IPv4 range of sandboxes' addresses with --network nat",
    )
    add(
        "--isolation",
        choices=["auto", "namespaces", "process"],
        help="how sandboxes are isolated: namespaces (Linux, as root), process (plain "
        "processes: much weaker, and every run says so), or auto (namespaces where they work)",
    )
    add(
        "--mask",
        dest="masks",
        action="append",
        metavar="PATH",
        help="a host path hidden from sandboxes (repeatable)",
    )
    add(
        "--share",
        dest="shares",
        action="append",
        metavar="DIR",
        help="a host directory mounted read-write at the same path in every sandbox "
        "(for example a log directory for sweeps)",
    )
    add(
        "--expose",
        dest="exposes",
        action="append",
        metavar="HOST[:PATH]",
        help="a host path mounted read-only in every sandbox, at PATH or at its own path "
        "(repeatable; for example an interpreter's prefix)",
    )
    add(
        "--disk-gib",
        type=non_negative,
        metavar="GIB",
        help="each sandbox's disk, what its writes may take (default: 12, or less on a "
        "small disk; 0: no quota)",
    )
    add(
        "--snapshot-gib",
        type=non_negative,
        metavar="GIB",
        help="the disk each account's snapshots may take, in all (default: one sandbox's disk)",
    )
    add(
        "--max-pids",
        type=positive,
        metavar="N",
        help="the most processes of all sandboxes at once (default: 3/4 of the kernel's)",
    )
    add(
        "--engine",
        choices=["local", "ray"],
        help="where sandboxes run: this machine, or the nodes of a Ray cluster (pip extra ray)",
    )
    add(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster's HOST:PORT (default: the cluster this machine is part of)",
    )
    add(
        "--console-port",
        type=port,
        metavar="PORT",
        help="the web console's port (default: the API's port + 1, here "
        f"{default_console_port(DEFAULT_PORT)}; any free port when --port is 0; 0: any free port)",
    )
    add("--no-console", dest="console", action="store_false", help="serve no web console")
    add(
        "--ready-file",
        type=Path,
        metavar="FILE",
        help="write {url, consoleUrl, apiKey} here once listening",
    )
    add(
        "--context",
        default=LOCAL,
        metavar="NAME",
        help="the context to record this server as in your config",
    )
    add("--no-context", action="store_true", help="record no context (leave your config alone)")
    add(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log each request and each run's start and end (-vv: debug)",
    )
    add(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default=None,  # -v's level unless given
        help="what to log, to stderr (default: warning; info with -v)",
    )


def _quota_options(
    add: Callable[..., Any], note: str, kind: Callable[[str], int] = positive
) -> None:
    """A flag for each of an account's quotas (`--max-queued`...), its help ending in `note`."""
    for name, text in QUOTA_HELP.items():
        add(f"--{name.replace('_', '-')}", type=kind, help=f"quota: {text}{note}")


def _group(
    group: argparse.ArgumentParser, name: str, parents: list[argparse.ArgumentParser]
) -> Callable[[str, str], argparse.ArgumentParser]:
    """Make `group` a group of commands (bare, it prints its help); a function that adds one,
    handled by `_commands.<name>_<command>`."""
    group.set_defaults(help_of=group)
    commands = group.add_subparsers(title="commands", metavar="COMMAND")

    def command(command_name: str, text: str) -> argparse.ArgumentParser:
        parser = _parser(commands, command_name, text, parents=parents)
        parser.set_defaults(handler=f"{name}_{command_name}")
        return parser

    return command


def _swarms_parser(swarms: argparse.ArgumentParser, client: list[argparse.ArgumentParser]) -> None:
    command = _group(swarms, "swarms", client)

    run = command("run", "start a run")
    add_field_options(run, START_FIELDS)
    run.add_argument("--wait", action="store_true", help="follow the run, as `swarms wait` does")
    _follow_options(run)
    _json_option(run, "print the run (with --wait, the finished run) as JSON")

    listing = command("list", "your runs, newest first")
    _json_option(listing, "print the runs as JSON")
    get = command("get", "a run and its sandboxes")
    _run_id(get)
    _json_option(get, "print the run as JSON")
    wait = command("wait", "follow a run until it ends; exit 0 only if every sandbox succeeded")
    _run_id(wait)
    _follow_options(wait)
    _json_option(wait, "print the finished run as JSON")
    logs = command("logs", "the output tails of a run's sandboxes, or of one")
    _run_id(logs)
    logs.add_argument(
        "index",
        nargs="?",
        type=int,
        help="one sandbox: its stdout to stdout and its stderr to stderr (default: all, "
        "each under a header)",
    )
    _json_option(logs, "print the sandboxes (or the one) as JSON")
    results = command("results", "each sandbox's result, in index order")
    _run_id(results)
    results.add_argument("-o", "--output", type=Path, help="write the results JSONL to this file")
    _json_option(results, "print the results JSONL, one sandbox a line")
    cancel = command("cancel", "cancel a run: queued sandboxes never start, running ones stop")
    _run_id(cancel)
    _json_option(cancel, "print the run as JSON")


def _run_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("swarm_id", metavar="ID", help="a run id, or any unique start of one")


def _json_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--json", action="store_true", help=text)


def _follow_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-interval", type=float, default=3.0, help="seconds between polls")
    parser.add_argument("-o", "--output", type=Path, help="write the results JSONL here at the end")


def _sandboxes_parser(
    sandboxes: argparse.ArgumentParser, client: list[argparse.ArgumentParser]
) -> None:
    command = _group(sandboxes, "sandboxes", client)

    create = command("create", "start a sandbox that lives until killed or timed out")
    add_field_options(create, SANDBOX_FIELDS)
    _json_option(create, "print the sandbox as JSON (its E2B address and token too)")
    _json_option(command("list", "your live long-lived sandboxes, newest first"), "as JSON")
    for name, text in (
        ("get", "a sandbox (a run's or a long-lived one)"),
        ("kill", "end a long-lived sandbox"),
    ):
        parser = command(name, text)
        parser.add_argument(
            "sandbox_id", metavar="ID", help="a sandbox id, or any unique start of one"
        )
        _json_option(parser, "print the sandbox as JSON")


def _accounts_parser(
    accounts: argparse.ArgumentParser, client: list[argparse.ArgumentParser]
) -> None:
    command = _group(accounts, "accounts", client)

    add = command("add", "add an account; prints its key, shown this once")
    add.add_argument("name", help="its name: 1 to 63 of a-z, 0-9, '.', '_' and '-'")
    add.add_argument(
        "--scopes",
        metavar="SCOPES",
        help=f"what its key may do, from {','.join(ACCOUNT_SCOPES)} (default: both)",
    )
    _quota_options(add.add_argument, " (default: the server's)")
    _json_option(add, "print the account as JSON (its key too)")
    _json_option(command("list", "the accounts, with their scopes and quotas"), "as JSON")
    quotas = command("set", "set an account's own quotas (0: the server's default again)")
    quotas.add_argument("name", help="the account's name")
    _quota_options(quotas.add_argument, "", whole)
    _json_option(quotas, "print the account as JSON")
    for name, text in (
        ("rotate", "give an account a new key, refusing the old one; prints the new key"),
        ("remove", "remove an account: its keys stop working, its runs and sandboxes end"),
    ):
        parser = command(name, text)
        parser.add_argument("name", help="the account's name")
        _json_option(parser, "print the account as JSON")


def _login_parser(login: argparse.ArgumentParser) -> None:
    login.add_argument("--url", default=HOSTED_API_URL, help="the server's URL")
    login.add_argument(
        "--key",
        help="its API key; `-` or none reads it from stdin, or asks for it without showing it "
        "on a terminal (a key on the command line stays in your shell's history)",
    )
    login.add_argument("--name", help="the context's name (default: the URL's host and port)")
    login.set_defaults(handler="login")


def _context_parser(context: argparse.ArgumentParser) -> None:
    command = _group(context, "context", [])
    listing = command("list", "the recorded contexts; * marks the current one")
    _json_option(listing, "print the contexts as JSON (never their keys)")
    for name, text in (("use", "make a context the current one"), ("remove", "forget a context")):
        command(name, text).add_argument("name", help="the context's name")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `inspect-swarm` console script."""
    try:
        try:
            code = _dispatch(build_parser().parse_args(argv))
        except SystemExit as ex:  # argparse's: help, version, usage errors
            code = ex.code if isinstance(ex.code, int) else int(ex.code is not None)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, as a tool that SIGPIPE ends does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _SIGPIPE_EXIT


def _dispatch(args: argparse.Namespace) -> int:
    handler = getattr(args, "handler", None)
    if handler is None:
        args.help_of.print_help()
        return 0
    try:
        if handler == "server":
            return _server(args)
        if callable(handler):  # a command of its own module (show, plot)
            return int(handler(args))
        from . import _commands

        code: int = getattr(_commands, handler)(args)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # an OSError, but no error of the command's: `main` ends it quietly
    except (ValueError, OSError, TimeoutError) as ex:
        print(f"inspect-swarm: error: {ex}", file=sys.stderr)
        return 1


def _server(args: argparse.Namespace) -> int:
    from ..server._serve import serve

    if args.api_keys:
        print(
            "inspect-swarm server: warning: a key given with --api-key is on the command line, "
            "where every local user can read it (/proc/PID/cmdline); give keys with "
            f"--api-key-file FILE or in ${KEYS_VARIABLE} instead",
            file=sys.stderr,
        )
    levels = ["warning", "info", "debug"]
    given = {name: getattr(args, name) for name in ServerOptions._fields}
    given["log_level"] = args.log_level or levels[min(args.verbose, 2)]
    options: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
    serve(
        ServerOptions(**options),
        on_ready=None if args.no_context else partial(_record_context, args.context),
    )
    return 0


def _record_context(name: str, url: str, key: str) -> str:
    """Record a server started here as the context `name`; what the user is told about it."""
    from ..client._contexts import Context, record

    try:
        current = record(Context(name, url, key, "server"), make_current=False)
    except (OSError, ValueError) as ex:
        return f"context: not recorded ({ex})"
    if current:
        return f"context: {name} (current: the CLI and SwarmsClient() here talk to this server)"
    return f"context: {name} (not the current one: `inspect-swarm context use {name}` picks it)"


_UNUSED_MODULES = ("httpx._main", "trio")
"""What the client's libraries import because it is installed, though this process never uses
it: httpx its own command line (click, rich, pygments), httpcore its trio support (the CLI
blocks, and its MCP server runs on asyncio). Together, a third of a client command's start."""


def _unused_modules() -> tuple[str, ...]:
    """The modules this process blocks: `_UNUSED_MODULES`, but trio when inspect_ai is told to
    run on it, since `show`, `plot` and `replay` read logs on inspect_ai's async backend."""
    backend = os.environ.get("INSPECT_ASYNC_BACKEND", "").lower()
    return tuple(name for name in _UNUSED_MODULES if not (name == "trio" and backend == "trio"))


def run() -> None:
    """The `inspect-swarm` console script: `main`, in a process of its own."""
    # a None in sys.modules makes an import fail as if the module were not installed, which
    # both libraries allow for; only here, since other code in a process may need them
    for name in _unused_modules():
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    sys.exit(main())
