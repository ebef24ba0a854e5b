"""The Swarms API's request bodies: models made from the fields' one definition
(`inspect_swarm._swarms_api`), their checks, and the domain's requests they become.

Bad input is 400 `invalid_request` naming the field, not FastAPI's 422 (see `records._wire` for the
other assumptions the spec leaves open). The models name each field by its Python name and take
it by its wire name; they also describe the bodies in the OpenAPI document (`edge._openapi`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model

from ..._swarms_api import (
    ACCOUNT_SCOPES,
    DEFAULT_SIZE,
    INPUT_FIELDS,
    MEMORY_GB,
    QUOTA_HELP,
    QUOTA_WIRE,
    SANDBOX_FIELDS,
    START_FIELDS,
    VCPUS,
    ApiField,
    required_groups,
)
from ..model._rules import (
    MAX_NAME,
    check_command_line,
    check_env,
    check_file_path,
    check_labels,
    check_program,
    check_text,
    parse_json,
    shown,
)
from ..model._types import (
    InvalidRequest,
    RunRequest,
    SandboxInput,
    SandboxRequest,
    Size,
    refusing_bad_input,
)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


_Model = TypeVar("_Model", bound=BaseModel)


def _model(name: str, doc: str, fields: Mapping[str, ApiField]) -> type[_Strict]:
    """A strict model of `fields`, each taken by its wire name."""
    made = {key: _pydantic_field(field) for key, field in fields.items()}
    return create_model(name, __base__=_Strict, __doc__=doc, **made)  # type: ignore[call-overload,no-any-return]


SizeBody = create_model(
    "SizeBody",
    __base__=_Strict,
    __doc__="The size of a sandbox (every sandbox of a run).",
    vcpus=(cast(Any, Literal)[VCPUS], DEFAULT_SIZE["vcpus"]),
    memoryGb=(int, Field(default=DEFAULT_SIZE["memoryGb"], ge=MEMORY_GB[0], le=MEMORY_GB[1])),
)
"""The size of a sandbox: `vcpus` one of `VCPUS`, `memoryGb` within `MEMORY_GB`."""


def _pydantic_field(field: ApiField) -> tuple[Any, Any]:
    """The annotation and `Field` of `field` on the wire."""
    kind = field.kind
    annotation: Any
    if kind == "command":
        annotation = NonEmpty | Annotated[list[str], Field(min_length=1)]
    elif kind in ("integer", "seconds"):
        annotation = int
    elif kind == "inputs":
        annotation = Annotated[list[InputBody], Field(min_length=1)]  # type: ignore[valid-type]
    elif kind == "size":
        return SizeBody, Field(default_factory=SizeBody, alias=field.wire, description=field.help)
    elif kind in ("env", "files", "labels"):
        return dict[str, str], Field(default_factory=dict, alias=field.wire, description=field.help)
    elif kind == "args":
        return list[str], Field(default_factory=list, alias=field.wire, description=field.help)
    else:
        annotation = Annotated[str, StringConstraints(min_length=field.least or 0)]
    bounds = {"ge": field.least, "le": field.most} if kind in ("integer", "seconds") else {}
    constraints: dict[str, Any] = {k: v for k, v in bounds.items() if v is not None}
    if field.required and field.group is None:
        return annotation, Field(alias=field.wire, description=field.help, **constraints)
    return annotation | None, Field(
        default=None, alias=field.wire, description=field.help, **constraints
    )


NonEmpty = Annotated[str, StringConstraints(min_length=1)]

InputBody = _model(
    "InputBody", "What one sandbox adds to the run: arguments, variables and files.", INPUT_FIELDS
)
StartBody = _model("StartBody", "The body of `POST /api/swarms`.", START_FIELDS)
SandboxBody = _model(
    "SandboxBody",
    "The body of `POST /v1/sandboxes`: one long-lived sandbox (its `timeoutSeconds` is its "
    "lifetime, which ends sooner when it is killed or its lease ends).",
    SANDBOX_FIELDS,
)

QuotasBody = create_model(
    "QuotasBody",
    __base__=_Strict,
    __doc__="An account's own quotas, each in place of the server's default (null: the "
    "default again).",
    **{
        wire: (int | None, Field(default=None, ge=1, alias=wire, description=QUOTA_HELP[name]))
        for name, wire in QUOTA_WIRE.items()
    },
)  # type: ignore[call-overload]


class AccountBody(_Strict):
    """The body of `POST /admin/accounts`: a new account's name, its key's scopes (default:
    read and provision) and its own quotas (default: the server's)."""

    name: str
    scopes: list[cast(Any, Literal)[ACCOUNT_SCOPES]] | None = None  # type: ignore[valid-type]
    quotas: QuotasBody | None = None  # type: ignore[valid-type]


# loc entries that name fields (pydantic adds union member tags such as "constrained-str")
_WIRE_NAMES = (
    {
        field.wire
        for fields in (START_FIELDS, SANDBOX_FIELDS, INPUT_FIELDS)
        for field in fields.values()
    }
    | {"vcpus", "memoryGb", "name", "scopes", "quotas"}
    | set(QUOTA_WIRE.values())
)


def account_request(raw: Any) -> tuple[str, list[str] | None, dict[str, int]]:
    """A new account's name, scopes (None: the default) and own quotas (by `Quotas` name),
    raising InvalidRequest that names the first bad field."""
    body = _validated(AccountBody, raw)
    quotas: dict[str, int | None] = {} if body.quotas is None else _quota_values(body.quotas)
    return body.name, body.scopes, {k: v for k, v in quotas.items() if v is not None}


def quotas_request(raw: Any) -> dict[str, int | None]:
    """The quotas a `PATCH` body sets, by `Quotas` name (None: the server's default again),
    raising InvalidRequest that names the first bad field."""
    return _quota_values(_validated(QuotasBody, raw))


def _quota_values(body: BaseModel) -> dict[str, int | None]:
    """The quotas a body gave (those it left out are not there), by `Quotas` name."""
    given = dict(body)
    return {name: given[wire] for name, wire in QUOTA_WIRE.items() if wire in body.model_fields_set}


def _validate(model: type[_Model], raw: Any) -> dict[str, Any]:
    """Validate a body, raising InvalidRequest that names the first bad field; its values by
    Python name."""
    return dict(_validated(model, raw))


def _validated(model: type[_Model], raw: Any) -> _Model:
    """A body as its model, or InvalidRequest naming the first bad field."""
    if not isinstance(raw, dict):
        raise InvalidRequest("body", f"expected a JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as ex:
        error = ex.errors()[0]
        loc = list(error["loc"])
        # an unknown field is named by the last entry, which is no field of ours
        unknown = loc.pop() if error["type"] == "extra_forbidden" else None
        parts = [p for p in loc if p in _WIRE_NAMES or isinstance(p, int)]
        field = ".".join(str(p) for p in [*parts, *([unknown] if unknown else [])])
        got = f" (got {shown(error['input'], 80)})" if error["type"] != "missing" else ""
        raise InvalidRequest(field or "body", f"{error['msg']}{got}") from None


def json_body(data: bytes) -> Any:
    """Parse a JSON request body, raising InvalidRequest when it is not one the API takes."""
    with refusing_bad_input():
        return parse_json(data)


def start_request(raw: Any, idempotency_key: str | None) -> RunRequest:
    """The request a start body makes (with the `Idempotency-Key` header's key, if given,
    over the body's), raising InvalidRequest that names the first bad field."""
    return run_request(_checked(StartBody, START_FIELDS, raw), raw, idempotency_key)


def run_request(
    values: Mapping[str, Any], raw: dict[str, Any], idempotency_key: str | None
) -> RunRequest:
    """The request of a start body `raw` whose values (by Python name) its model took."""
    inputs = values["inputs"]
    command = values["command"]
    return RunRequest(
        **{
            **values,
            "command": command if isinstance(command, str) else tuple(command),
            "size": _size(values["size"]),
            "count": values["count"] if values["count"] is not None else len(inputs),
            "inputs": None if inputs is None else tuple(_input(item) for item in inputs),
            "idempotency_key": idempotency_key or values["idempotency_key"],
            "digest": body_hash(raw),
        }
    )


def sandbox_request(raw: Any) -> SandboxRequest:
    """The request a `POST /v1/sandboxes` body makes, raising InvalidRequest that names the
    first bad field."""
    values = _checked(SandboxBody, SANDBOX_FIELDS, raw)
    return SandboxRequest(**{**values, "size": _size(values["size"])})


def _size(body: BaseModel) -> Size:
    values = dict(body)
    return Size(values["vcpus"], values["memoryGb"])


def _input(body: BaseModel) -> SandboxInput:
    values = dict(body)
    return SandboxInput(tuple(values["args"]), values["env"], values["files"])


def _checked(model: type[BaseModel], fields: Mapping[str, ApiField], raw: Any) -> dict[str, Any]:
    """A body's values once its model and its fields' rules accept it."""
    values = _validate(model, raw)
    for group in required_groups(fields).values():
        if sum(values[name] is not None for name in group) != 1:
            names = " or ".join(f"`{fields[name].wire}`" for name in group)
            raise InvalidRequest(fields[group[0]].wire, f"give exactly one of {names}")
    with refusing_bad_input():
        for name, field in fields.items():
            if values[name] is not None:
                _check(field, field.wire, values[name])
    return values


def _check(field: ApiField, where: str, value: Any) -> None:
    """Refuse what the field's kind never accepts, beyond its model's types and bounds."""
    kind = field.kind
    if kind == "command":
        if isinstance(value, str):
            check_text(where, value)
        else:
            check_program(f"{where}.0", value[0])
            for part, text in enumerate(value[1:], 1):
                check_text(f"{where}.{part}", text)
    elif kind == "text":
        check_text(where, value, control=False, most=MAX_NAME)
    elif kind == "path":
        _check_absolute(where, value, "must be an absolute path")
    elif kind == "args":
        for j, arg in enumerate(value):
            check_text(f"{where}.{j}", arg)
    elif kind == "env":
        check_env(where, value)
        check_command_line(where, [], value)
    elif kind == "files":
        for path in value:
            _check_absolute(where, path, "file paths must be absolute")
    elif kind == "labels":
        check_labels(where, value)
    elif kind == "inputs":
        for i, item in enumerate(value):
            for name, part in dict(item).items():
                _check(INPUT_FIELDS[name], f"{where}.{i}.{INPUT_FIELDS[name].wire}", part)


def _check_absolute(where: str, path: str, problem: str) -> None:
    if not path.startswith("/"):
        raise InvalidRequest(where, f"{problem}, got {shown(path)}")
    check_file_path(where, path)


def body_hash(raw: dict[str, Any]) -> str:
    """A hash of a start body without its idempotency key, to compare retried starts."""
    key = START_FIELDS["idempotency_key"].wire
    canonical = {k: v for k, v in raw.items() if k != key}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
