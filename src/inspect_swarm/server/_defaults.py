"""The server's defaults that depend on this machine, shown as computed by `server --help`.

Kept apart from `_serve` (which imports the web stack) so the CLI's help starts fast.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 8767
MIN_BODY_KIB = 64
"""The slowest average rate of a request body, in KiB a second, after the read timeout."""
DISK_GIB = 12
"""Each sandbox's disk, as the hosted service's (`--disk-gib` sets another)."""
MAX_QUEUED = 20_000
"""The most sandboxes one account may have waiting to start, in all its runs."""
RUNS_PER_MINUTE = 600
"""The most runs one account may start in any 60 seconds."""
MAX_CLIENT_CONNECTIONS = 256
"""The most connections one client address may hold open (sandboxes' counted apart)."""


def default_state_dir() -> Path:
    """Where the server keeps its database and sandboxes unless told otherwise."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "inspect-swarm"


def default_memory_gib() -> int:
    """Three quarters of this machine's memory, in GiB (at least 1)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, int(0.75 * total / 1024**3))
