"""The Swarms API client: start, follow and cancel runs of one command on many sandboxes.

The same client works against this project's own swarm server (`inspect-swarm server`) and
against hosted servers of the Swarms API; `SwarmsClient` is synchronous and
`AsyncSwarmsClient` asynchronous, both driving one set of sans-IO operations. It needs the
`server` extra (httpx) and imports nothing of the server.
"""

import lazy_loader

# Each public name is imported on first use, from the imports of `__init__.pyi`, so that the
# command line can read contexts without importing the HTTP stack.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
