"""The Swarms API's wire format: request bodies, their checks, and error bodies.

Every assumption about details the spec leaves open is made here, once:
- errors are `{"detail": message, "code": code}` (plus `"field"` for validation), and bad input
  is 400 `invalid_request`, not FastAPI's 422;
- run `status` is `queued` (nothing started yet), `running`, then `completed` (also after cancel);
- `GET /api/swarms` answers `{"swarms": [...]}`, newest first, unpaginated;
- the stderr tail is `stderrTail`; `result` is UTF-8 text, else base64 with
  `"resultEncoding": "base64"`; `estimatedCostCents` is 0 on this server.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import AbstractContextManager
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ._limits import (
    MAX_NAME,
    check_command_line,
    check_env,
    check_labels,
    check_path,
    check_text,
    parse_json,
    refusing,
    shown,
)

TAIL_BYTES = 16 * 1024
RESULT_BYTES = 64 * 1024
SMALL = (2, 4)

NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class ApiError(Exception):
    """An error answered as JSON with the spec's code and HTTP status."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body of the error."""
        body: dict[str, Any] = {"detail": self.detail, "code": self.code}
        if self.field is not None:
            body["field"] = self.field
        return body


def invalid(field: str, detail: str) -> ApiError:
    """A 400 `invalid_request` naming the field."""
    return ApiError(400, "invalid_request", f"{field}: {detail}", field=field)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class Size(_Strict):
    """The size of every sandbox of a run."""

    vcpus: Literal[1, 2, 4] = 2
    memoryGb: int = Field(default=4, ge=1, le=8)

    @property
    def name(self) -> str:
        """`small` for 2 vCPU and 4 GB, otherwise `custom`."""
        return "small" if (self.vcpus, self.memoryGb) == SMALL else "custom"

    def wire(self) -> dict[str, Any]:
        """The run's `size` object."""
        return {"name": self.name, "vcpus": self.vcpus, "memoryGb": self.memoryGb}


class SwarmInput(_Strict):
    """What one sandbox adds to the run: arguments, variables and files."""

    args: list[str] = []
    env: dict[str, str] = {}
    files: dict[str, str] = {}


TEMPLATES = ("base", "python", "code-interpreter")
"""The templates this server offers (each is the same root: the host's system directories)."""


class SandboxFields(_Strict):
    """What a sandbox is made of, for a run's sandboxes or one of its own."""

    env: dict[str, str] = {}
    size: Size = Size()
    timeoutSeconds: int | None = None
    template: NonEmpty | None = None
    image: NonEmpty | None = None


class StartBody(SandboxFields):
    """The body of `POST /api/swarms`."""

    command: NonEmpty | Annotated[list[str], Field(min_length=1)]
    count: int | None = Field(default=None, ge=1)
    inputs: Annotated[list[SwarmInput], Field(min_length=1)] | None = None
    files: dict[str, str] = {}
    concurrency: int | None = Field(default=None, ge=1)
    resultPath: NonEmpty | None = None
    name: str | None = None
    idempotencyKey: NonEmpty | None = None


class SandboxBody(SandboxFields):
    """The body of `POST /v1/sandboxes`: one long-lived sandbox.

    Its `timeoutSeconds` is its lifetime, which ends sooner when it is killed or its lease ends.
    """

    metadata: dict[str, str] = {}


# loc entries that name fields (pydantic adds union member tags such as "constrained-str")
_FIELDS = {
    name for model in (StartBody, SandboxBody, Size, SwarmInput) for name in model.model_fields
}

_Body = TypeVar("_Body", bound=_Strict)


def _validate(model: type[_Body], raw: Any) -> _Body:
    """Validate a body, raising ApiError(400) that names the first bad field."""
    if not isinstance(raw, dict):
        raise invalid("body", f"expected a JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as ex:
        error = ex.errors()[0]
        loc = list(error["loc"])
        # an unknown field is named by the last entry, which is no field of ours
        unknown = loc.pop() if error["type"] == "extra_forbidden" else None
        parts = [p for p in loc if p in _FIELDS or isinstance(p, int)]
        field = ".".join(str(p) for p in [*parts, *([unknown] if unknown else [])])
        got = f" (got {shown(error['input'], 80)})" if error["type"] != "missing" else ""
        raise invalid(field or "body", f"{error['msg']}{got}") from None


def refusing_bad_input() -> AbstractContextManager[None]:
    """Answer a `BadInput` raised inside as a 400 naming its field."""
    return refusing(lambda bad: invalid(bad.field, bad.detail))


def json_body(data: bytes) -> Any:
    """Parse a JSON request body, raising ApiError(400) when it is not one the API takes."""
    with refusing_bad_input():
        return parse_json(data)


def parse_start(raw: Any) -> StartBody:
    """Validate a start body, raising ApiError(400) that names the first bad field."""
    body = _validate(StartBody, raw)
    if (body.count is None) == (body.inputs is None):
        raise invalid("count", "give exactly one of `count` or `inputs`")
    for where, files in _all_files(body):
        for path in files:
            if not path.startswith("/"):
                raise invalid(where, f"file paths must be absolute, got {shown(path)}")
    if body.resultPath is not None and not body.resultPath.startswith("/"):
        raise invalid("resultPath", f"must be an absolute path, got {shown(body.resultPath)}")
    _check_template(body)
    with refusing_bad_input():
        _check_start_text(body)
    return body


def _check_start_text(body: StartBody) -> None:
    commands = [body.command] if isinstance(body.command, str) else body.command
    for i, part in enumerate(commands):
        check_text("command" if isinstance(body.command, str) else f"command.{i}", part)
    if body.name is not None:
        check_text("name", body.name, control=False, most=MAX_NAME)
    if body.idempotencyKey is not None:
        check_text("idempotencyKey", body.idempotencyKey, control=False, most=MAX_NAME)
    if body.resultPath is not None:
        check_path("resultPath", body.resultPath)
    check_env("env", body.env)
    check_command_line("env", [], body.env)
    for where, files in _all_files(body):
        for path in files:
            check_path(where, path)
    for i, item in enumerate(body.inputs or []):
        for j, arg in enumerate(item.args):
            check_text(f"inputs.{i}.args.{j}", arg)
        check_env(f"inputs.{i}.env", item.env)


def parse_sandbox(raw: Any) -> SandboxBody:
    """Validate a sandbox body, raising ApiError(400) that names the first bad field."""
    body = _validate(SandboxBody, raw)
    _check_template(body)
    with refusing_bad_input():
        check_env("env", body.env)
        check_command_line("env", [], body.env)
        check_labels("metadata", body.metadata)
    return body


def _check_template(body: SandboxFields) -> None:
    if body.template is not None and body.image is not None:
        raise invalid("image", "give `template` or `image`, not both")
    if body.image is not None:
        raise ApiError(
            400,
            "image_unsupported",
            f"image: this server has no image registry (got {shown(body.image)}); "
            f"use template, one of {', '.join(TEMPLATES)}",
            field="image",
        )
    if body.template is not None and body.template not in TEMPLATES:
        raise ApiError(
            400,
            "template_not_found",
            f"template: unknown template {shown(body.template)}; "
            f"this server has {', '.join(TEMPLATES)}",
            field="template",
        )


def _all_files(body: StartBody) -> list[tuple[str, dict[str, str]]]:
    found = [("files", body.files)]
    found += [(f"inputs.{i}.files", item.files) for i, item in enumerate(body.inputs or [])]
    return found


def body_hash(raw: dict[str, Any]) -> str:
    """A hash of a start body without its idempotency key, to compare retried starts."""
    canonical = {k: v for k, v in raw.items() if k != "idempotencyKey"}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
