"""The `inspect-swarm` command line: the swarm server, its client, MCP tools and log readers.

Each command group is a module of its own that imports what it needs only when it runs, so
that `--help` and the client's commands start in a fraction of a second.
"""

from ._main import run

__all__ = ["run"]
