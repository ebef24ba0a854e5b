"""The Swarms API's request bodies: their shapes, their checks, and the domain's requests
they become.

Bad input is 400 `invalid_request` naming the field, not FastAPI's 422 (see `records._wire` for the
other assumptions the spec leaves open).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

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
    Size,
    refusing_bad_input,
)

NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class SizeBody(_Strict):
    """The size of a sandbox (every sandbox of a run)."""

    vcpus: Literal[1, 2, 4] = 2
    memoryGb: int = Field(default=4, ge=1, le=8)

    def domain(self) -> Size:
        """The size this body asks for."""
        return Size(self.vcpus, self.memoryGb)


class SwarmInput(_Strict):
    """What one sandbox adds to the run: arguments, variables and files."""

    args: list[str] = []
    env: dict[str, str] = {}
    files: dict[str, str] = {}

    def domain(self) -> SandboxInput:
        """What this input adds to its sandbox."""
        return SandboxInput(tuple(self.args), self.env, self.files)


class SandboxFields(_Strict):
    """What a sandbox is made of, for a run's sandboxes or one of its own."""

    env: dict[str, str] = {}
    size: SizeBody = SizeBody()
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

    def domain(self, digest: str, idempotency_key: str | None) -> RunRequest:
        """The request this body makes (`digest`: its hash; the header's idempotency key
        wins over the body's)."""
        inputs = self.inputs
        return RunRequest(
            command=self.command if isinstance(self.command, str) else tuple(self.command),
            size=self.size.domain(),
            count=self.count if self.count is not None else len(inputs or []),
            inputs=None if inputs is None else tuple(item.domain() for item in inputs),
            env=self.env,
            files=self.files,
            timeout_seconds=self.timeoutSeconds,
            template=self.template,
            result_path=self.resultPath,
            concurrency=self.concurrency,
            name=self.name,
            idempotency_key=idempotency_key or self.idempotencyKey,
            digest=digest,
            image=self.image,
        )


class SandboxBody(SandboxFields):
    """The body of `POST /v1/sandboxes`: one long-lived sandbox.

    Its `timeoutSeconds` is its lifetime, which ends sooner when it is killed or its lease ends.
    """

    metadata: dict[str, str] = {}


# loc entries that name fields (pydantic adds union member tags such as "constrained-str")
_FIELDS = {
    name for model in (StartBody, SandboxBody, SizeBody, SwarmInput) for name in model.model_fields
}

_Body = TypeVar("_Body", bound=_Strict)


def _validate(model: type[_Body], raw: Any) -> _Body:
    """Validate a body, raising InvalidRequest that names the first bad field."""
    if not isinstance(raw, dict):
        raise InvalidRequest("body", f"expected a JSON object, got {type(raw).__name__}")
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
        raise InvalidRequest(field or "body", f"{error['msg']}{got}") from None


def json_body(data: bytes) -> Any:
    """Parse a JSON request body, raising InvalidRequest when it is not one the API takes."""
    with refusing_bad_input():
        return parse_json(data)


def start_request(raw: Any, idempotency_key: str | None) -> RunRequest:
    """The request a start body makes (with the `Idempotency-Key` header's key, if given),
    raising InvalidRequest that names the first bad field."""
    return parse_start(raw).domain(body_hash(raw), idempotency_key)


def parse_start(raw: Any) -> StartBody:
    """Validate a start body, raising InvalidRequest that names the first bad field."""
    body = _validate(StartBody, raw)
    if (body.count is None) == (body.inputs is None):
        raise InvalidRequest("count", "give exactly one of `count` or `inputs`")
    for where, files in _all_files(body):
        for path in files:
            if not path.startswith("/"):
                raise InvalidRequest(where, f"file paths must be absolute, got {shown(path)}")
    if body.resultPath is not None and not body.resultPath.startswith("/"):
        raise InvalidRequest(
            "resultPath", f"must be an absolute path, got {shown(body.resultPath)}"
        )
    with refusing_bad_input():
        _check_start_text(body)
    return body


def _check_start_text(body: StartBody) -> None:
    if isinstance(body.command, str):
        check_text("command", body.command)
    else:
        check_program("command.0", body.command[0])
        for i, part in enumerate(body.command[1:], 1):
            check_text(f"command.{i}", part)
    if body.name is not None:
        check_text("name", body.name, control=False, most=MAX_NAME)
    if body.idempotencyKey is not None:
        check_text("idempotencyKey", body.idempotencyKey, control=False, most=MAX_NAME)
    if body.resultPath is not None:
        check_file_path("resultPath", body.resultPath)
    check_env("env", body.env)
    check_command_line("env", [], body.env)
    for where, files in _all_files(body):
        for path in files:
            check_file_path(where, path)
    for i, item in enumerate(body.inputs or []):
        for j, arg in enumerate(item.args):
            check_text(f"inputs.{i}.args.{j}", arg)
        check_env(f"inputs.{i}.env", item.env)


def parse_sandbox(raw: Any) -> SandboxBody:
    """Validate a sandbox body, raising InvalidRequest that names the first bad field."""
    body = _validate(SandboxBody, raw)
    with refusing_bad_input():
        check_env("env", body.env)
        check_command_line("env", [], body.env)
        check_labels("metadata", body.metadata)
    return body


def _all_files(body: StartBody) -> list[tuple[str, dict[str, str]]]:
    found = [("files", body.files)]
    found += [(f"inputs.{i}.files", item.files) for i, item in enumerate(body.inputs or [])]
    return found


def body_hash(raw: dict[str, Any]) -> str:
    """A hash of a start body without its idempotency key, to compare retried starts."""
    canonical = {k: v for k, v in raw.items() if k != "idempotencyKey"}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
