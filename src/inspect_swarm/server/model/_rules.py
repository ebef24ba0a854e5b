"""What input the server takes: JSON, text, names, paths and a command line's size.

Every surface checks its input here before anything acts on it, so a value no system call
could take (a NUL byte in a path, a variable named `A=B`, an argument over the kernel's
limit) is refused at the edge with the field it came in, rather than failing later inside a
sandbox's work. Each check raises `BadInput`, which each surface answers in its own shape.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from ipaddress import IPv4Network
from typing import Any

MAX_DEPTH = 32
"""How deeply JSON bodies may nest (the deepest body of the API nests 4 levels)."""
MAX_NAME = 256
"""The longest run name, idempotency key or metadata key, in characters."""
MAX_LABEL = 1024
"""The longest metadata value, in characters."""
MAX_LABELS = 64
"""The most metadata entries on one sandbox."""
PATH_MAX = 4095
"""The longest path in bytes (the kernel's PATH_MAX, 4096, holds its final NUL)."""
NAME_MAX = 255
"""The longest path component in bytes."""
ARG_STRLEN = 32 * os.sysconf("SC_PAGE_SIZE")
"""The longest single argument or `NAME=value` string the kernel passes (MAX_ARG_STRLEN)."""
EXEC_HEADROOM = 16 * 1024
"""What the server's own variables (the lease's, PATH, HOME...) may add to a command line."""
ARG_MAX = os.sysconf("SC_ARG_MAX") - EXEC_HEADROOM
"""What a command's arguments and variables may come to, in bytes (with their pointers)."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"(?:\*\.)?(?:{_LABEL}\.)*(?=[a-z0-9-]*[a-z-]){_LABEL}")
"""A host name, or `*.` and one; its last label has a letter or hyphen (an address has none)."""
_NAME_LENGTH = 253
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class BadInput(ValueError):
    """A value the server refuses: the field it came in and why."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


@contextmanager
def refusing(error: Callable[[BadInput], Exception]) -> Iterator[None]:
    """Raise `error(bad)` for a `BadInput` raised inside: the surface's own answer to it."""
    try:
        yield
    except BadInput as ex:
        raise error(ex) from None


def shown(value: object, width: int = 60) -> str:
    """A value as JSON for a message, cut to `width` characters."""
    text = json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def parse_json(data: bytes) -> Any:
    """A JSON body, refused when it is not JSON, nests too deeply or holds what is not text."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as ex:  # also bytes that are not UTF-8, and integers of 4,300+ digits
        raise BadInput("body", f"not valid JSON ({ex})") from None
    # only a body with that many brackets can nest that deeply, and only an escape can make
    # a lone surrogate (UTF-8 cannot): most bodies need no walk
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        _check_depth(value, 0)
    if _SURROGATE_ESCAPE.search(data):
        _check_strings(value, "body")
    return value


def _too_deep() -> BadInput:
    return BadInput("body", f"JSON nested deeper than {MAX_DEPTH} levels; send a flatter body")


def _check_depth(value: dict[str, Any] | list[Any], depth: int) -> None:
    """Refuse parsed JSON nested deeper than MAX_DEPTH (the recursion stops there)."""
    if depth >= MAX_DEPTH:
        raise _too_deep()
    for child in value.values() if isinstance(value, dict) else value:
        if isinstance(child, dict | list):
            _check_depth(child, depth + 1)


def _check_strings(value: Any, where: str) -> None:
    """Refuse parsed JSON (no deeper than MAX_DEPTH) with a string, or key, that is not text."""
    if isinstance(value, str):
        _check_unicode(where, value)
    elif isinstance(value, dict | list):
        prefix = "" if where == "body" else f"{where}."
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            if isinstance(key, str):
                _check_unicode(where, key)
            _check_strings(child, f"{prefix}{key}")


def _check_unicode(field: str, text: str) -> None:
    """Refuse a string that is not text (a lone UTF-16 surrogate, which JSON can carry)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        raise BadInput(
            field, f"{shown(text)} holds a lone UTF-16 surrogate, which is not text; send UTF-8"
        ) from None


def check_text(field: str, value: str, *, control: bool = True, most: int | None = None) -> None:
    """Refuse NUL bytes (which no argument, variable or path can hold), control characters
    unless `control`, and more than `most` characters."""
    if not (value.isascii() and value.isprintable()):  # else none of these can be in it
        _check_unicode(field, value)
        if "\0" in value:
            raise BadInput(
                field, f"{shown(value)} holds a NUL byte, which no argument or path can; remove it"
            )
        if not control and (found := _CONTROL.search(value)):
            raise BadInput(
                field, f"{shown(value)} holds the control character {found[0]!r}; remove it"
            )
    if most is not None and len(value) > most:
        raise BadInput(field, f"{len(value)} characters, over the limit of {most}; shorten it")


def check_path(field: str, path: str) -> None:
    """Refuse a path no system call takes: NUL or control characters, over PATH_MAX bytes or
    a component over NAME_MAX bytes."""
    check_text(field, path, control=False)
    size = len(path) if path.isascii() else len(path.encode())
    if size > PATH_MAX:
        raise BadInput(
            field, f"{shown(path)} is {size} bytes, over the limit of {PATH_MAX}; shorten it"
        )
    for part in path.split("/") if size > NAME_MAX else ():
        if len(part.encode()) > NAME_MAX:
            raise BadInput(
                field,
                f"the component {shown(part)} is over the limit of {NAME_MAX} bytes; shorten it",
            )


def check_file_path(field: str, path: str) -> None:
    """`check_path`, and refuse a path that names a directory whatever is there: `/`, or one
    ending in `/`, `.` or `..`."""
    check_path(field, path)
    if path.endswith("/") or path.rpartition("/")[2] in (".", ".."):
        raise BadInput(field, f"{shown(path)} names a directory, not a file; give a file's path")


def check_program(field: str, program: str) -> None:
    """Refuse a command line's program that is no path at all (empty)."""
    if not program:
        raise BadInput(field, "an empty string names no program; give a program's name or path")
    check_text(field, program)


def check_env(field: str, env: Mapping[str, str]) -> None:
    """Refuse variables whose names are not POSIX names or whose values hold a NUL byte
    (their size is the command line's: `check_command_line`)."""
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise BadInput(
                field,
                f"{shown(name)} is not a variable name; use letters, digits and _, "
                "not starting with a digit",
            )
        check_text(f"{field}.{name}", value)


def check_labels(field: str, labels: Mapping[str, str]) -> None:
    """Refuse metadata with too many entries, or keys or values too long or not plain text."""
    if len(labels) > MAX_LABELS:
        raise BadInput(
            field, f"{len(labels)} entries, over the limit of {MAX_LABELS}; keep fewer labels"
        )
    for key, value in labels.items():
        check_text(field, key, control=False, most=MAX_NAME)
        check_text(f"{field}.{key}", value, most=MAX_LABEL)


def check_command_line(field: str, argv: list[str], env: Mapping[str, str]) -> None:
    """Refuse a command line the kernel would refuse (E2BIG): an argument or variable over
    MAX_ARG_STRLEN, or all of them with their pointers over ARG_MAX less the server's own."""
    strings = [*argv, *(f"{name}={value}" for name, value in env.items())]
    total = 0
    for text in strings:
        size = len(text.encode()) + 1
        if size > ARG_STRLEN:
            raise BadInput(
                field,
                f"one argument or variable ({shown(text)}) is {size} bytes, over the kernel's "
                f"limit of {ARG_STRLEN} for one; pass large data in a file instead",
            )
        total += size + 8
    if total > ARG_MAX:
        raise BadInput(
            field,
            f"the arguments and variables come to {total} bytes, over the kernel's limit of "
            f"{ARG_MAX} (ARG_MAX less {EXEC_HEADROOM} for the server's own variables); "
            "pass large data in a file instead",
        )


def parse_addresses(field: str, entries: object) -> tuple[IPv4Network, ...]:
    """A list of IPv4 addresses and CIDR ranges (`"1.2.3.4"`, `"10.0.0.0/8"`): what a
    sandbox's deny list may name."""
    return tuple(_address(field, entry, names=False) for entry in _entries(field, entries))


def parse_allow_list(
    field: str, entries: object
) -> tuple[tuple[IPv4Network, ...], tuple[str, ...]]:
    """A sandbox's allow list, split into its IPv4 addresses and CIDR ranges and its host
    names (`"pypi.org"`, or `"*.example.com"` for every name below it), lowercase and
    without a final dot."""
    networks: list[IPv4Network] = []
    names: list[str] = []
    for entry in _entries(field, entries):
        name = _host_name(entry)
        if name is None:
            networks.append(_address(field, entry, names=True))
        else:
            names.append(name)
    return tuple(networks), tuple(names)


def _host_name(entry: object) -> str | None:
    """`entry` as a host name or wildcard (`*.` and a name), lowercase without a final dot,
    or None when it is not one (a name's last label is never all digits, so no address is
    one)."""
    if not isinstance(entry, str):
        return None
    name = entry.lower().removesuffix(".")
    if len(name) > _NAME_LENGTH or not _HOST_NAME.fullmatch(name):
        return None
    return name


def _entries(field: str, entries: object) -> list[object]:
    if not isinstance(entries, list):
        raise BadInput(field, f"must be a list of addresses (strings), got {shown(entries)}")
    return entries


def _address(field: str, entry: object, *, names: bool) -> IPv4Network:
    if not isinstance(entry, str):
        raise BadInput(field, f"{shown(entry)} is not an IP address or CIDR range")
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        raise BadInput(
            field,
            f"{shown(entry)} is not an IPv4 address, CIDR range or host name; give one of those"
            if names
            else f"{shown(entry)}: host names are filtered in the allow list only (allowOut); "
            "give IPv4 addresses or CIDR ranges here",
        ) from None
    if not isinstance(network, IPv4Network):
        raise BadInput(
            field,
            f"{shown(entry)}: this server routes sandboxes out over IPv4 only; give IPv4 "
            "addresses or CIDR ranges",
        )
    return network
