"""How the command line reads values (durations, sizes, NAME=VALUE pairs, inputs files), and
the options it makes of the Swarms API's fields (`inspect_swarm._swarms_api`): one flag per
field, named, typed, grouped and described by the field."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._swarms_api import INPUT_FIELDS, ApiField

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Seconds from `600`, `90s`, `10m` or `1h30m`."""
    if text.isdigit():
        return int(text)
    match = _DURATION.match(text)
    if not text or match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(
            f"expected seconds or a duration such as 90s, 10m or 1h30m, got {text!r}"
        )
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def duration_text(seconds: float) -> str:
    """`seconds` as `parse_duration` reads it back: 30s, 10m, 1h30m."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(hours, "h"), (minutes, "m"), (secs, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


def _size(text: str) -> dict[str, int]:
    from ..client._client import parse_size

    try:
        size = parse_size(text)
    except ValueError as ex:
        raise argparse.ArgumentTypeError(str(ex).removeprefix("size: ")) from None
    assert size is not None
    return size


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of GiB, 0 or more, got {text!r}")
    return value


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return int(text)


def whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


def port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return int(text)


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def read_inputs(path: Path) -> list[dict[str, Any]]:
    """One sandbox's `{args, env, files}` per line of a JSONL file (blank lines skipped)."""
    inputs: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as ex:
            raise ValueError(f"--inputs {path}: line {number} is not JSON ({ex})") from None
        if not isinstance(item, dict) or not set(item) <= set(INPUT_FIELDS):
            raise ValueError(
                f"--inputs {path}: line {number} must be an object with args, env and files"
            )
        inputs.append(item)
    if not inputs:
        raise ValueError(f"--inputs {path}: the file has no inputs")
    return inputs


def _inputs_file(text: str) -> list[dict[str, Any]]:
    try:
        return read_inputs(Path(text))
    except (ValueError, OSError) as ex:
        raise argparse.ArgumentTypeError(str(ex).removeprefix(f"--inputs {text}: ")) from None


def _kind_type(field: ApiField) -> Callable[[str], Any]:
    """How the command line reads a value of `field`."""
    readers: dict[str, Callable[[str], Any]] = {
        "integer": positive,
        "seconds": parse_duration,
        "inputs": _inputs_file,
        "size": _size,
        "env": _env_pair,
        "files": _env_pair,
        "labels": _env_pair,
    }
    return readers.get(field.kind, str)


_PAIRS = ("env", "files", "labels")
"""The kinds given as repeated KEY=VALUE flags."""


def _flag(name: str, field: ApiField) -> str:
    return "--" + (field.alias or name).replace("_", "-")


def _default(field: ApiField) -> str:
    """The server's default as a flag's value would give it."""
    if field.kind == "size":
        return f"{field.default['vcpus']}x{field.default['memoryGb']}"
    if field.kind == "seconds":
        return duration_text(field.default)
    return str(field.default)


def add_field_options(parser: argparse.ArgumentParser, fields: Mapping[str, ApiField]) -> None:
    """One option per field, stored under the field's Python name: fields of a group
    exclude each other (one of them required when the fields are)."""
    groups: dict[str, Any] = {}
    for name, field in fields.items():
        target: Any = parser
        if field.group is not None:
            if field.group not in groups:
                groups[field.group] = parser.add_mutually_exclusive_group(required=field.required)
            target = groups[field.group]
        text = field.help[0].lower() + field.help[1:].removesuffix(".")  # as the CLI's own
        if field.default is not None:
            text += f" (the server's default: {_default(field)})"
        pairs = field.kind in _PAIRS
        target.add_argument(
            _flag(name, field),
            dest=name,
            type=_kind_type(field),
            help=text.replace("%", "%%"),
            metavar=field.metavar or ("DURATION" if field.kind == "seconds" else None),
            required=field.required and field.group is None,
            **({"action": "append", "default": []} if pairs else {}),
        )


def field_values(args: argparse.Namespace, fields: Mapping[str, ApiField]) -> dict[str, Any]:
    """The fields' values the arguments give (None: not given), by Python name."""
    values = {name: getattr(args, name) for name in fields}
    for name, field in fields.items():
        if field.kind in _PAIRS:
            values[name] = dict(values[name]) or None
    return values
