"""Sandbox providers for swarms.

`multidir` gives a sample several named environments without Docker, each a private
working directory on this machine, so per-member sandboxes run locally and in tests:
`Task(sandbox=multidir("default", "alice", "bob"))`, `sandbox=("multidir", "compose.yaml")`
(the compose file's service names) or `--sandbox multidir`. It isolates nothing beyond the
working directory: commands run as host processes of the current user.

`swarm_server` gives each of a sample's names or compose services an isolated sandbox on a
swarm server (or any E2B-compatible server): `sandbox=swarm_server("agent-1", "agent-2")`
or `("swarm_server", "compose.yaml")`. Without a configured server it starts one here.
"""

from ._multidir import MultidirConfig, MultidirSandboxEnvironment, multidir
from ._swarm_server import SwarmServerConfig, SwarmServerSandboxEnvironment, swarm_server

__all__ = [
    "MultidirConfig",
    "MultidirSandboxEnvironment",
    "SwarmServerConfig",
    "SwarmServerSandboxEnvironment",
    "multidir",
    "swarm_server",
]
