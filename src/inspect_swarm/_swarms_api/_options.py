"""The fields of a start (`POST /api/swarms`) and of a long-lived sandbox
(`POST /v1/sandboxes`): each written once, as a key of a TypedDict annotated with its
`ApiField`, so that the client's keyword arguments are typed by the same definition the
command line, the MCP tools and the server read.

No `from __future__ import annotations` here: the annotations are read at run time.
"""

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypedDict

from ._fields import DEFAULT_SIZE, MEMORY_GB, VCPUS, ApiField

DEFAULT_TEMPLATE = "base"
"""The template of a sandbox whose request names none."""

_VCPUS = "|".join(str(n) for n in VCPUS)
_SIZE = ApiField(
    "size",
    "size",
    f'Each sandbox\'s size: "VCPUSxGB" such as "2x4", or {{"vcpus": {_VCPUS}, "memoryGb": '
    f"{MEMORY_GB[0]}-{MEMORY_GB[1]}}}.",
    default=DEFAULT_SIZE,
    metavar="VCPUSxGB",
)
_TEMPLATE = ApiField(
    "template",
    "text",
    "The sandbox template: base, python or code-interpreter.",
    least=1,
    default=DEFAULT_TEMPLATE,
    group="what",
)
_IMAGE = ApiField(
    "image",
    "text",
    "An OCI image reference to run instead of a template (hosted servers).",
    least=1,
    group="what",
)
_ENV = ApiField("env", "env", "Variables set in every sandbox.", metavar="NAME=VALUE")

MAX_TIMEOUT = 21600
"""The longest timeout of a sandbox, in seconds."""
DEFAULT_TIMEOUT = 600
"""The timeout of a run's sandbox, and the lifetime of a long-lived one, unless asked."""


def _timeout(help: str) -> ApiField:
    """A `timeoutSeconds` field (`timeout` on the command line and in the tools)."""
    return ApiField(
        "timeoutSeconds",
        "seconds",
        help,
        most=MAX_TIMEOUT,
        default=DEFAULT_TIMEOUT,
        alias="timeout",
    )


COMMAND = ApiField(
    "command",
    "command",
    "What every sandbox runs: a shell command (sh -c), or a list of arguments run as is. "
    "MARITIME_SWARM_INDEX (0, 1, ...), MARITIME_SWARM_COUNT and MARITIME_SWARM_ID are set.",
    least=1,
    required=True,
)
"""A start's command (the client's first argument, so no key of `StartOptions`)."""


class StartOptions(TypedDict, total=False):
    """The fields of a start besides its command (None leaves one out)."""

    count: Annotated[
        int | None,
        ApiField(
            "count",
            "integer",
            "How many sandboxes run the command; give this or inputs.",
            least=1,
            group="sandboxes",
            required=True,
        ),
    ]
    inputs: Annotated[
        Sequence[Mapping[str, Any]] | None,
        ApiField(
            "inputs",
            "inputs",
            "One {args, env, files} per sandbox, instead of count.",
            least=1,
            metavar="FILE",
            group="sandboxes",
            required=True,
        ),
    ]
    size: Annotated[str | Mapping[str, int] | None, _SIZE]
    timeout_seconds: Annotated[
        int | None,
        _timeout(
            "How long each sandbox's command may run, in seconds (from the server's least, "
            "10 unless it says otherwise)."
        ),
    ]
    concurrency: Annotated[
        int | None,
        ApiField(
            "concurrency",
            "integer",
            "The most sandboxes running at once (default: as many as fit).",
            least=1,
        ),
    ]
    env: Annotated[Mapping[str, str] | None, _ENV]
    files: Annotated[
        Mapping[str, str] | None,
        ApiField(
            "files",
            "files",
            "Files (absolute path to content) written in every sandbox.",
            metavar="PATH=CONTENT",
        ),
    ]
    template: Annotated[str | None, _TEMPLATE]
    image: Annotated[str | None, _IMAGE]
    result_path: Annotated[
        str | None,
        ApiField(
            "resultPath",
            "path",
            "An absolute path read back from each sandbox after its command (up to 64 KB), "
            "returned as its result.",
            least=1,
            metavar="PATH",
        ),
    ]
    name: Annotated[
        str | None, ApiField("name", "text", "A name for the run, shown when runs are listed.")
    ]
    idempotency_key: Annotated[
        str | None,
        ApiField(
            "idempotencyKey",
            "text",
            "A key that makes a retried start return the run it started (the client sends a "
            "new one as the Idempotency-Key header unless given).",
            least=1,
            metavar="KEY",
        ),
    ]


class SandboxOptions(TypedDict, total=False):
    """The fields of a long-lived sandbox (None leaves one out)."""

    template: Annotated[str | None, _TEMPLATE]
    image: Annotated[str | None, _IMAGE]
    size: Annotated[str | Mapping[str, int] | None, _SIZE]
    timeout_seconds: Annotated[
        int | None, _timeout("How long it lives, in seconds, unless killed or released first.")
    ]
    env: Annotated[Mapping[str, str] | None, _ENV]
    metadata: Annotated[
        Mapping[str, str] | None,
        ApiField("metadata", "labels", "Your labels, shown with it.", metavar="KEY=VALUE"),
    ]


def _fields(options: type) -> dict[str, ApiField]:
    """Each key of `options` (a TypedDict of annotated fields) and its field."""
    return {name: hint.__metadata__[0] for name, hint in options.__annotations__.items()}


START_FIELDS: dict[str, ApiField] = {"command": COMMAND, **_fields(StartOptions)}
"""Every field of a start, by its Python name, in the order surfaces show them."""
SANDBOX_FIELDS: dict[str, ApiField] = _fields(SandboxOptions)
"""Every field of a long-lived sandbox, by its Python name."""


def required_groups(fields: Mapping[str, ApiField]) -> dict[str, list[str]]:
    """The groups of `fields` one of which must be given, each with its fields' names."""
    groups: dict[str, list[str]] = {}
    for name, field in fields.items():
        if field.group is not None and field.required:
            groups.setdefault(field.group, []).append(name)
    return groups
