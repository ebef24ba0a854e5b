"""The server's defaults that depend on this machine, shown as computed by `server --help`.

Kept apart from `_serve` (which imports the web stack) so the CLI's help starts fast.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 8767


def default_console_port(api_port: int) -> int:
    """The web console's port unless told: the one after the API's, or any free one when the
    API's is (0)."""
    return 0 if api_port == 0 else api_port + 1


def default_state_dir() -> Path:
    """Where the server keeps its database and sandboxes unless told otherwise."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "inspect-swarm"


def default_memory_gib() -> int:
    """Three quarters of this machine's memory, in GiB (at least 1)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, int(0.75 * total / 1024**3))
