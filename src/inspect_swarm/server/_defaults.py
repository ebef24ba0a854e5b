"""The server's options and their defaults, each written once here: `inspect-swarm server`
reads its flags' defaults from `ServerOptions`, and the server's settings and HTTP limits read
theirs from `SERVER_DEFAULTS`. The defaults that depend on this machine are functions, shown
as computed by `server --help`.

Kept apart from `_serve` (which imports the web stack) so the CLI's help starts fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, NamedTuple

DEFAULT_PORT = 8767
KEYS_VARIABLE = "INSPECT_SWARM_API_KEYS"
"""The environment variable a server reads accepted keys from: `KEY[:SCOPES]` entries
separated by white space."""

MIN_BODY_KIB = 64
"""The slowest average rate of a request body, in KiB a second, after the read timeout."""
DISK_GIB = 12
"""Each sandbox's disk, as the hosted service's (`--disk-gib` sets another)."""
MAX_QUEUED = 20_000
"""The most sandboxes one account may have waiting to start, in all its runs."""
RUNS_PER_MINUTE = 600
"""The most runs one account may start in any 60 seconds."""
MAX_RUNNING = 10_000
"""The most sandboxes one account may have running at once, in its runs and outside them."""
MAX_MEMORY_GB = 40_000
"""The most memory, in GB, one account's sandboxes may book at once."""
MAX_CLIENT_CONNECTIONS = 256
"""The most connections one client address may hold open (sandboxes' counted apart)."""
NetworkMode = Literal["none", "nat", "host"]
"""Sandboxes' network: loopback only; their own, routed out through the server (NAT, under
its rules); or the host's."""
NETWORK_RANGE = "10.213.0.0/16"
"""The private range sandboxes' addresses come from when their network is routed out."""


class ServerOptions(NamedTuple):
    """Everything `inspect-swarm server` takes (a named tuple, read by the command line as it
    starts: a dataclass would cost it the import of `inspect`)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_keys: tuple[str, ...] = ()
    """`KEY[:SCOPES]`: accepted keys, one account each (with those of `api_key_file` and of
    the `INSPECT_SWARM_API_KEYS` variable; none at all: one made and kept)."""
    api_key_file: Path | None = None
    """A file of accepted keys, one `KEY[:SCOPES]` a line (blank and `#` lines skipped), which
    no one but its owner may write."""
    memory_gib: int | None = None
    """What sandboxes book (None: `default_memory_gib()`, or the Ray cluster's)."""
    state_dir: Path | None = None
    """Runs, keys and sandboxes (None: `default_state_dir()`)."""
    max_sandboxes: int = 5000
    """The most sandboxes in one run."""
    max_body_mib: int = 16
    max_file_mib: int = 256
    read_timeout: float = 30.0
    min_body_kib: int = MIN_BODY_KIB
    """The slowest average rate of a request body, in KiB a second, after the read timeout."""
    max_connections: int = 4096
    max_client_connections: int = MAX_CLIENT_CONNECTIONS
    """The most connections one client address may hold open (sandboxes' counted apart)."""
    max_queued: int = MAX_QUEUED
    """Every account's quota of sandboxes waiting to start, in all its runs."""
    runs_per_minute: int = RUNS_PER_MINUTE
    """Every account's quota of runs started in any 60 seconds."""
    max_running: int = MAX_RUNNING
    """Every account's quota of sandboxes running at once (a run's counted at its
    concurrency)."""
    max_memory_gb: int = MAX_MEMORY_GB
    """Every account's quota of memory its sandboxes book at once, in GB."""
    max_sandbox_connections: int = 128
    plan: Literal["scale", "none"] = "scale"
    min_timeout: int = 10
    """The shortest `timeoutSeconds` accepted, in seconds."""
    idle_release: float = 600.0
    stuck_timeout: float = 900.0
    network: NetworkMode = "none"
    network_range: str = NETWORK_RANGE
    """The IPv4 range of sandboxes' addresses with `network="nat"` (no route of this machine
    may overlap it)."""
    isolation: Literal["auto", "namespaces", "process"] = "auto"
    masks: tuple[str, ...] = ()
    shares: tuple[str, ...] = ()
    ready_file: Path | None = None
    exposes: tuple[str, ...] = ()
    """`HOST[:PATH]`: a host path mounted read-only in every sandbox (at PATH, else its own)."""
    disk_gib: float | None = None
    snapshot_gib: float | None = None
    """The disk each account's snapshots may take, in all (None: one sandbox's disk)."""
    max_pids: int | None = None
    engine: Literal["local", "ray"] = "local"
    """Where sandboxes of runs run: this machine, or the nodes of a Ray cluster."""
    ray_address: str | None = None
    """The Ray cluster to join (None: the one this machine is part of)."""
    log_level: str = "warning"
    console: bool = True
    """Whether to serve the web console, on a port of its own."""
    console_port: int | None = None
    """The console's port (None: `default_console_port` of the API's)."""


SERVER_DEFAULTS = ServerOptions()
"""The options of a server told nothing."""


def default_console_port(api_port: int) -> int:
    """The web console's port unless told: the one after the API's, or any free one when the
    API's is (0)."""
    return 0 if api_port == 0 else api_port + 1


def default_state_dir() -> Path:
    """Where the server keeps its database and sandboxes unless told otherwise."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "inspect-swarm"


def machine_memory_bytes() -> int:
    """This machine's memory, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_memory_gib() -> int:
    """Three quarters of this machine's memory, in GiB (at least 1)."""
    return max(1, int(0.75 * machine_memory_bytes() / 1024**3))
