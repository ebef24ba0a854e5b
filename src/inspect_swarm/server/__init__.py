"""The swarm server, its Swarms API client, CLI and MCP tools.

A self-hosted server for the Swarms API (one shell command on many isolated sandboxes at
once) and a client that works the same against it and against hosted servers. The swarm
library never imports this package; its server needs the `server` extra.
"""

import lazy_loader

# Each public name is imported on first use, from the imports of `__init__.pyi`, so that the
# CLI, which lives in this package, starts without the client's HTTP stack when it needs none.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
