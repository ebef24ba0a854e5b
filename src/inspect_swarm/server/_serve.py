"""Start a swarm server: bind, make or load a key, print where it is, serve until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._defaults import (
    KEYS_VARIABLE,
    ServerOptions,
    default_console_port,
    default_memory_gib,
    default_state_dir,
)
from .domain._leases import Keyring
from .domain._server import SwarmServer
from .edge._app import create_app
from .edge._auth import ALL_SCOPES, KNOWN_SCOPES
from .edge._gate import Gate
from .edge._middleware import KIB, MIB, HttpLimits
from .edge._ports import ByPort
from .edge._protocol import ClientTally, http_protocol, websocket_protocol
from .edge.console import create_console
from .engines._engine import Engine
from .engines._local import LocalRunner
from .engines._scheduler import Scheduler
from .model._keys import ACCOUNT_KEY_PREFIX, new_key
from .model._types import Quotas, Settings
from .records._runs import Runs
from .records._store import Store
from .sandboxes._isolation import (
    DISK_BYTES,
    GIB,
    IsolationConfig,
    SandboxError,
    SandboxHost,
)


def default_disk_gib(state_dir: Path, memory_gib: int) -> int:
    """Each sandbox's disk: the spec's 12 GiB, or less where the state directory's file
    system could not give that much to every sandbox at once. As many sandboxes run at once
    as `memory_gib` holds of the smallest (1 GiB): they share 90% of its free space. At
    least 1 GiB."""
    free = shutil.disk_usage(state_dir).free
    return max(1, min(DISK_BYTES // GIB, int(0.9 * free / memory_gib / GIB)))


def parse_key(spec: str) -> tuple[str, frozenset[str]]:
    """`KEY` (read and provision) or `KEY:scope[,scope]` with scopes from read, provision
    and admin."""
    key, _, scopes = spec.rpartition(":")
    if key and scopes and set(scopes.split(",")) <= KNOWN_SCOPES:
        return key, frozenset(scopes.split(","))
    return spec, ALL_SCOPES


def given_keys(options: ServerOptions) -> list[str]:
    """The keys `options` give: their own, their key file's and the `INSPECT_SWARM_API_KEYS`
    variable's (each `KEY[:SCOPES]`)."""
    keys = [*options.api_keys, *os.environ.get(KEYS_VARIABLE, "").split()]
    if options.api_key_file is not None:
        keys += _key_file(options.api_key_file)
    return keys


def _key_file(path: Path) -> list[str]:
    """The keys of a key file, refusing one that others may write (they could add a key)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as ex:
        raise ValueError(f"--api-key-file: cannot read {str(path)!r} ({ex.strerror})") from None
    if mode & 0o022:
        raise ValueError(
            f"--api-key-file: {str(path)!r} may be written by others, who could add a key; "
            f"`chmod go-w {path}` (or 600)"
        )
    keys = [line.strip() for line in text.splitlines()]
    keys = [key for key in keys if key and not key.startswith("#")]
    if not keys:
        raise ValueError(
            f"--api-key-file: {str(path)!r} holds no key; write one KEY[:SCOPES] a line"
        )
    return keys


def _server_key(state_dir: Path) -> str:
    """The server's own key, made once and kept in its state directory."""
    path = state_dir / "api-key"
    if path.exists():
        os.chmod(path, 0o600)
        return path.read_text().strip()
    key = new_key(ACCOUNT_KEY_PREFIX)
    write_fresh(path, key + "\n")
    return key


def trusted_state_dir(state_dir: Path) -> None:
    """Refuse a state directory another user could have written to: it must be the server
    user's, writable by no group or other, and hold nothing that is a symbolic link or
    another user's (a key file put there, say, or a link to a file the server would write)."""
    refuse = f"--state-dir: {state_dir}"
    mine = os.geteuid()
    status = os.stat(state_dir)
    if status.st_uid != mine:
        raise ValueError(
            f"{refuse} belongs to uid {status.st_uid}, not to the server's user ({mine}); "
            "name a directory of the server's user, or one that does not exist yet"
        )
    if status.st_mode & 0o022:
        raise ValueError(
            f"{refuse} is writable by its group or others (mode {status.st_mode & 0o777:o}); "
            f"check that nothing in it is another's, then `chmod go-w {state_dir}`"
        )
    for entry in os.scandir(state_dir):
        if entry.is_symlink():
            raise ValueError(
                f"{refuse}: {entry.path} is a symbolic link; remove it (the server makes "
                "everything in its state directory itself)"
            )
        if (owner := entry.stat(follow_symlinks=False).st_uid) != mine:
            raise ValueError(
                f"{refuse}: {entry.path} belongs to uid {owner}, not to the server's user "
                f"({mine}); remove it (the server makes everything in its state directory)"
            )


def write_fresh(path: Path, text: str, option: str = "--state-dir") -> None:
    """Write a file anew that only its owner may read (it holds a key): an earlier one of
    the server's user is replaced, and a symbolic link or another user's file is refused
    (naming the `option` that gave its path), never followed or written into."""
    with contextlib.suppress(FileNotFoundError):
        status = os.lstat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid():
            raise ValueError(
                f"{option}: {path}: exists and is not a file of the server's user (a symbolic "
                "link, or another user's); remove it, or name a path that does not exist"
            )
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(fd, 0o600)  # whatever the umask took away, and no more
        file.write(text)


def assemble(
    store: Store,
    host: SandboxHost,
    settings: Settings,
    url: str = "",
    options: ServerOptions | None = None,
) -> SwarmServer:
    """The domain of a server at `url`, on the engine `options` name (this machine's by
    default), taking up where the last server on the store left off."""
    keyring = Keyring(store, url)
    if options is not None and options.engine == "ray":
        from .engines.ray._engine import RayRunner, ray_isolation

        runs = Runs(store, ray_isolation(host))
        runner = RayRunner(host, options.ray_address, options.host)
        engine: Engine = Scheduler(runs, settings, keyring, runner)
    else:
        runs = Runs(store, host.describe())
        engine = Scheduler(runs, settings, keyring, LocalRunner(host))
    return SwarmServer(store, runs, engine, keyring, settings)


Announce = Callable[[str, str], str]
"""Told the server's URL as clients on this machine reach it and its first key, once it
listens; returns a line to print under the server's address (the CLI records a context)."""


def serve(options: ServerOptions, on_ready: Announce | None = None) -> None:
    """Run the server in the foreground until interrupted."""
    logging.basicConfig(
        level=options.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    state_dir = (options.state_dir or default_state_dir()).resolve()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    trusted_state_dir(state_dir)
    os.chmod(state_dir, 0o700)  # its database and key files are the server's alone
    keys = dict(parse_key(k) for k in given_keys(options))
    if not keys:
        keys = {_server_key(state_dir): KNOWN_SCOPES}  # its operator's: accounts too
    store = Store(state_dir / "swarm.db")  # first: a database it cannot open stops it here
    sock = _listen(options.host, options.port)
    port = sock.getsockname()[1]
    host = f"[{options.host}]" if ":" in options.host else options.host
    url = f"http://{host}:{port}"
    console_sock = _console_socket(options)
    # sandboxes reach the server on its own port: a wildcard address is reached on loopback
    inner = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(options.host, options.host)
    memory_gib = options.memory_gib or _engine_memory_gib(options)
    disk_gib = (
        default_disk_gib(state_dir, memory_gib) if options.disk_gib is None else options.disk_gib
    )
    sandbox_host = _sandbox_host(
        IsolationConfig(
            state_dir,
            options.isolation,
            options.network,
            options.network_range,
            options.masks,
            _shares(options),
            forward=(inner, port),
            forward_limit=options.max_sandbox_connections,
            exposes=_exposes(options),
            disk_bytes=int(disk_gib * GIB),
            pids=options.max_pids,
        )
    )
    settings = Settings(
        memory_gib=memory_gib,
        max_sandboxes=options.max_sandboxes,
        min_timeout=options.min_timeout,
        idle_release=options.idle_release,
        stuck_timeout=options.stuck_timeout,
        plan=options.plan,
        disk_mb=_disk_mb(sandbox_host, state_dir),
        snapshot_mb=int(
            (disk_gib if options.snapshot_gib is None else options.snapshot_gib) * 1024
        ),
        quotas=Quotas(
            options.max_queued,
            options.runs_per_minute,
            options.max_running,
            options.max_memory_gb,
        ),
        network=options.network,
    )
    server = assemble(store, sandbox_host, settings, url, options)
    limits = HttpLimits(
        options.max_body_mib * MIB,
        options.max_file_mib * MIB,
        options.read_timeout,
        options.min_body_kib * KIB,
        options.max_client_connections,
    )
    app = create_app(server, keys, limits)
    served: ASGIApp = app
    ready = {"url": url}
    if console_sock is not None:
        console_port = console_sock.getsockname()[1]
        served = ByPort(app, create_console(server, app.state.keys, limits), console_port)
        ready["consoleUrl"] = f"http://{host}:{console_port}"
    first_key = next(iter(keys))
    print(f"inspect-swarm server on {url}", flush=True)
    print(f"  MARITIME_API_URL={url}", flush=True)
    print(f"  MARITIME_API_KEY={first_key}", flush=True)
    print(f"  isolation: {sandbox_host.describe()['note']}", flush=True)
    if on_ready is not None:
        here = f"[{inner}]" if ":" in inner else inner
        print(f"  {on_ready(f'http://{here}:{port}', first_key)}", flush=True)
    if "consoleUrl" in ready:
        print(f"  console: {ready['consoleUrl']}", flush=True)
    if options.ready_file is not None:
        write_fresh(options.ready_file, json.dumps({**ready, "apiKey": first_key}), "--ready-file")
    sockets = [sock] if console_sock is None else [sock, console_sock]
    gate = app.state.gate
    assert isinstance(gate, Gate), "create_app puts its routes' gate on the app"
    tally = ClientTally(limits.max_client_connections)
    protocol = http_protocol(limits, tally, {port: gate}, sandbox_host.forwarded)
    try:
        _run(served, sockets, protocol, tally, options.max_connections)
    finally:
        store.close()


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it; asyncio sets it only on sockets made with IPPROTO_TCP,
    # and without it a response (headers, then body) waits ~40 ms for a delayed ACK
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def _console_socket(options: ServerOptions) -> socket.socket | None:
    """The web console's socket, listening (None when the console is off)."""
    if not options.console:
        return None
    port = (
        default_console_port(options.port) if options.console_port is None else options.console_port
    )
    try:
        return _listen(options.host, port)
    except OSError as ex:
        raise ValueError(
            f"--console-port: cannot listen on {options.host}:{port} ({ex.strerror}); "
            "choose another port with --console-port, or serve no console with --no-console"
        ) from None


def _engine_memory_gib(options: ServerOptions) -> int:
    """What the engine's sandboxes may book unless told: 3/4 of this machine's memory, or on
    Ray the memory of the cluster's nodes (joining it)."""
    if options.engine == "local":
        return default_memory_gib()
    from .engines.ray._engine import connect

    return connect(options.ray_address)


def _disk_mb(host: SandboxHost, state_dir: Path) -> int:
    """What one sandbox's writes may fill: its disk, else the state directory's file system."""
    quota = host.config.disk_bytes if host.mode == "namespaces" else 0
    return (quota or shutil.disk_usage(state_dir).total) // MIB


def _shares(options: ServerOptions) -> tuple[str, ...]:
    shares = []
    for share in options.shares:
        path = Path(share).resolve()
        if not path.is_dir():
            raise ValueError(f"--share: {share!r} is not a directory; create it first")
        shares.append(str(path))
    return tuple(shares)


def _sandbox_host(config: IsolationConfig) -> SandboxHost:
    try:
        return SandboxHost(config)
    except SandboxError as ex:  # this machine cannot make the sandboxes asked for
        raise ValueError(str(ex)) from None


def _exposes(options: ServerOptions) -> tuple[tuple[str, str], ...]:
    exposes = []
    for expose in options.exposes:
        host, colon, inside = expose.partition(":")
        path = Path(host).resolve()
        if not path.exists():
            raise ValueError(f"--expose: {host!r} does not exist; name a host path that does")
        if colon and not inside.startswith("/"):
            raise ValueError(
                f"--expose: {expose!r} names {inside!r} in sandboxes; give an absolute path"
            )
        exposes.append((str(path), os.path.normpath(inside) if colon else str(path)))
    return tuple(exposes)


_GRACEFUL_SHUTDOWN_SECONDS = 5


def _run(
    app: ASGIApp,
    sockets: list[socket.socket],
    protocol: type[H11Protocol],
    tally: ClientTally,
    max_connections: int,
) -> None:
    # a stop waits at most a few seconds for open connections: E2B process streams stay open
    # for as long as their commands run, and would otherwise hold the server up indefinitely
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
        http=protocol,
        # only forwarded ports take a WebSocket (the E2B surface, with websockets installed)
        ws=websocket_protocol(tally) or "none",
        limit_concurrency=max_connections,
    )
    try:
        asyncio.run(uvicorn.Server(config).serve(sockets=sockets))
    except KeyboardInterrupt:
        sys.exit(130)
