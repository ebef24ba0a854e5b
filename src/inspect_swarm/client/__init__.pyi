"""The Swarms API client: runs of one command on many sandboxes, from Python."""

# The public API, for type checkers and IDEs; `__init__.py` imports each name on first use.
from ._client import (
    Accounts,
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
    "Accounts",
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
