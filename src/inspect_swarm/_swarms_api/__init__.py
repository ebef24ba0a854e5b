"""What the Swarms API's client and server both know of its requests: each field of a start
and of a long-lived sandbox, defined once (`_fields`, `_options`), and an account's quotas
(`_accounts`).

It sits below the client, the command line and the server, and imports none of them (an
import contract says so); it imports nothing but the standard library, so the command line
reads it at start-up for free.
"""

from ._accounts import ACCOUNT_SCOPES, QUOTA_HELP, QUOTA_WIRE, QuotaOptions
from ._fields import (
    DEFAULT_SIZE,
    INPUT_FIELDS,
    MEMORY_GB,
    VCPUS,
    ApiField,
    input_schema,
)
from ._options import (
    COMMAND,
    DEFAULT_TEMPLATE,
    DEFAULT_TIMEOUT,
    MAX_TIMEOUT,
    SANDBOX_FIELDS,
    START_FIELDS,
    SandboxOptions,
    StartOptions,
    required_groups,
)

__all__ = [
    "ACCOUNT_SCOPES",
    "COMMAND",
    "DEFAULT_SIZE",
    "DEFAULT_TEMPLATE",
    "DEFAULT_TIMEOUT",
    "INPUT_FIELDS",
    "MAX_TIMEOUT",
    "MEMORY_GB",
    "QUOTA_HELP",
    "QUOTA_WIRE",
    "SANDBOX_FIELDS",
    "START_FIELDS",
    "VCPUS",
    "ApiField",
    "QuotaOptions",
    "SandboxOptions",
    "StartOptions",
    "input_schema",
    "required_groups",
]
