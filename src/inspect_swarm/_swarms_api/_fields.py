"""One field of a Swarms API request: its name on the wire, its kind, bounds, default and a
line of help, from which each surface makes its own form of it."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

Kind = Literal[
    "command",
    "integer",
    "seconds",
    "inputs",
    "size",
    "env",
    "files",
    "labels",
    "text",
    "path",
    "args",
]
"""What a field holds, which decides how each surface takes and checks it: `seconds` is an
integer the command line reads as a duration (10m); `env`, `files` (absolute path to
content) and `labels` map strings to strings; `path` is an absolute path; `args` a list of
strings; `size` a sandbox's size (`{"vcpus", "memoryGb"}`, which the client and the command
line also take as `"2x4"`)."""

VCPUS = (1, 2, 4)
"""The vCPUs a sandbox may have."""
MEMORY_GB = (1, 8)
"""The least and most memory a sandbox may have, in GB."""
DEFAULT_SIZE = {"vcpus": 2, "memoryGb": 4}
"""The size of a sandbox whose request names none."""


class ApiField(NamedTuple):
    """A field of a request body, as every surface that takes it derives it (a named tuple:
    a dataclass would cost the command line's start-up the import of `inspect`)."""

    wire: str
    """Its name in the JSON body (`resultPath`)."""
    kind: Kind
    help: str
    """One line saying what it is, for a flag's help, a tool's schema and the API document."""
    least: int | None = None
    """The smallest value of a number, or the shortest text or list."""
    most: int | None = None
    """The largest value of a number."""
    default: Any = None
    """What the server uses when it is left out (None: nothing, or what `help` says)."""
    alias: str | None = None
    """Its name on the command line and in the MCP tools where that differs from the
    Python name (`timeout` for `timeout_seconds`)."""
    metavar: str | None = None
    """How the command line shows its value."""
    group: str | None = None
    """Fields of one group exclude each other."""
    required: bool = False
    """Always given (in a group: one of the group's fields is)."""


_STRINGS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_ARGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}


def input_schema(field: ApiField) -> dict[str, Any]:
    """The JSON schema of what the client takes for `field` (a size also as `"2x4"`)."""
    schema = {**_kind_schema(field), "description": field.help}
    if field.default is not None:
        schema["default"] = field.default
    return schema


def _kind_schema(field: ApiField) -> dict[str, Any]:
    kind = field.kind
    if kind == "command":
        return {"anyOf": [{"type": "string", "minLength": 1}, {**_ARGS, "minItems": 1}]}
    if kind in ("integer", "seconds"):
        bounds = {"minimum": field.least, "maximum": field.most}
        return {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}
    if kind == "inputs":
        item = {name: _kind_schema(part) for name, part in INPUT_FIELDS.items()}
        return {
            "type": "array",
            "minItems": 1,
            "items": {"type": "object", "properties": item, "additionalProperties": False},
        }
    if kind == "size":
        least, most = MEMORY_GB
        size = {
            "vcpus": {"enum": list(VCPUS)},
            "memoryGb": {"type": "integer", "minimum": least, "maximum": most},
        }
        whole = {"type": "object", "properties": size, "additionalProperties": False}
        return {"anyOf": [{"type": "string", "pattern": "^[0-9]+[xX][0-9]+$"}, whole]}
    if kind in ("env", "files", "labels"):
        return dict(_STRINGS)
    if kind == "args":
        return dict(_ARGS)
    return {"type": "string", **({"minLength": field.least} if field.least else {})}


INPUT_FIELDS: dict[str, ApiField] = {
    "args": ApiField("args", "args", "Arguments added to the command, shell-quoted."),
    "env": ApiField("env", "env", "Variables of this sandbox, over the run's."),
    "files": ApiField(
        "files", "files", "Files (absolute path to content) written before the command."
    ),
}
"""What one input gives its sandbox (an item of a start's `inputs`)."""
