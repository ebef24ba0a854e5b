"""Sandbox providers for swarms.

`multidir` gives a sample several named environments without Docker, each a private
working directory on this machine, so per-member sandboxes run locally and in tests:
`Task(sandbox=multidir("default", "alice", "bob"))`, `sandbox=("multidir", "compose.yaml")`
(the compose file's service names) or `--sandbox multidir`. It isolates nothing beyond the
working directory: commands run as host processes of the current user.
"""

from ._multidir import MultidirConfig, MultidirSandboxEnvironment, multidir

__all__ = ["MultidirConfig", "MultidirSandboxEnvironment", "multidir"]
