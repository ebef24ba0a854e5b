"""The swarm server, its Swarms API client, CLI, MCP tools and sweeps.

A self-hosted server for the Swarms API (one shell command on many isolated sandboxes at
once) and a client that works the same against it and against hosted servers. The swarm
library never imports this package; its server needs the `server` extra.
"""

from ._client import (
    APIConnectionError,
    AsyncSwarmsClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    PlanRequiredError,
    RateLimitError,
    Sandboxes,
    Servers,
    Swarms,
    SwarmsAPIError,
    SwarmsClient,
    is_finished,
)
from ._sweep import sample_arms, sweep

__all__ = [
    "APIConnectionError",
    "AsyncSwarmsClient",
    "AuthenticationError",
    "ConflictError",
    "NotFoundError",
    "PlanRequiredError",
    "RateLimitError",
    "Sandboxes",
    "Servers",
    "Swarms",
    "SwarmsAPIError",
    "SwarmsClient",
    "is_finished",
    "sample_arms",
    "sweep",
]
