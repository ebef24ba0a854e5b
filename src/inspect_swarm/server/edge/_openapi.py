"""The OpenAPI 3.1 document at `/openapi.json`: every route of the Swarms API, `/v1` and the E2B
control plane, made from the routes' declarations (`Declared`), the request models
(`_schema`, from the fields' one definition; E2B's in `e2b._answers`) and the answers' shapes
(`_answers`, `e2b._answers`).

The document is the same on every server: it holds no key, address or path of this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from ._answers import ErrorBody

OPENAPI_PATH = "/openapi.json"

_REASONS = {
    400: "The request is malformed or a field is invalid (the error names it).",
    401: "No key, or one the server does not know.",
    402: "This server does not offer Swarms (plan `none`).",
    403: "The key lacks the scope needed, or the request is beyond a limit.",
    404: "No such run, sandbox, lease or template (for this account).",
    409: "A conflict: the server is rented by another account, the idempotency key was used "
    "for another body, or the sandbox is in no state for this.",
    429: "The server's memory is booked in full; retry after the time `Retry-After` gives.",
    500: "The server failed (a sandbox could not boot).",
    501: "This server cannot do it (a pause where its cgroups have no freezer).",
    503: "The server is stopping or has too many connections.",
}

SECURITY = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "The account's API key."},
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-KEY",
        "description": "The account's API key, as the E2B SDK sends it.",
    },
}


def _responses(
    ok: dict[int, Any],
    errors: Iterable[int],
    error: type[BaseModel] = ErrorBody,
) -> dict[int | str, dict[str, Any]]:
    """A route's answers for its declaration: each success (a model, a media type with no
    schema of its own, or None for no body) and each error it may answer, in `error`'s shape.
    """
    answers: dict[int | str, dict[str, Any]] = {}
    for status, shape in ok.items():
        answers[status] = _success(shape)
    for status in errors:
        answers[status] = {"model": error, "description": _REASONS[status]}
    return answers


def _success(shape: Any) -> dict[str, Any]:
    if shape is None:
        return {"description": "Done; no body."}
    if isinstance(shape, str):
        return {"description": "Done.", "content": {shape: {"schema": {"type": "string"}}}}
    # a model says what it is; a union or list of them, "Done."
    doc = shape.__doc__ if isinstance(shape, type) else None
    return {"model": shape, "description": (doc or "Done.").splitlines()[0]}


KEYED: dict[str, Any] = {"security": [{"bearer": []}]}
"""A route's `openapi_extra` when it takes the account's key as a bearer token."""
E2B_KEYED: dict[str, Any] = {"security": [{"apiKey": []}, {"bearer": []}]}
"""A route's `openapi_extra` when it takes the key as E2B's header, or as a bearer token."""


_BODIES: dict[str, type[BaseModel]] = {}
"""The request models routes declared with `_request_body()`, whose schemas the document's
components hold."""


def _request_body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """A route's `openapi_extra` for a JSON body of `model` (the route reads the body itself,
    answering bad input as its API does rather than FastAPI's 422)."""
    _BODIES[model.__name__] = model
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    content = {"application/json": {"schema": ref}}
    return {"requestBody": {"required": required, "content": content}}


_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


class Declared:
    """Adds routes to `router` under the `tag`, taking keys as `security` says, each declared
    for the document. A route answers itself (no response model); its status code is its first
    success's.

    Args:
        router: Where the routes go.
        tag: The document's group of them.
        security: Their `openapi_extra` saying how they take a key (`KEYED`, `E2B_KEYED`).
    """

    def __init__(self, router: APIRouter, tag: str, security: dict[str, Any]) -> None:
        self._router = router
        self._tag = tag
        self._security = security

    def __call__(
        self,
        method: str,
        *paths: str,
        ok: dict[int, Any],
        errors: Iterable[int],
        summary: str,
        body: type[BaseModel] | None = None,
        body_required: bool = True,
        error: type[BaseModel] = ErrorBody,
        extra: dict[str, Any] | None = None,
    ) -> Callable[[_Endpoint], _Endpoint]:
        """A decorator that adds the endpoint at each of `paths`: its successes and errors as
        `_responses()` takes them, `body` the model of its JSON body, `extra` more of its
        `openapi_extra`."""
        openapi_extra = {**self._security, **(extra or {})}
        if body is not None:
            openapi_extra.update(_request_body(body, body_required))
        declared = {
            "response_model": None,
            "status_code": next(iter(ok)),
            "tags": [self._tag],
            "summary": summary,
            "responses": _responses(ok, errors, error),
            "openapi_extra": openapi_extra,
        }

        def register(endpoint: _Endpoint) -> _Endpoint:
            for path in paths:
                self._router.add_api_route(path, endpoint, methods=[method], **declared)
            return endpoint

        return register


def openapi_document(app: FastAPI, version: str) -> dict[str, Any]:
    """The document of `app`'s described routes."""
    document = get_openapi(
        title="inspect-swarm server",
        version=version,
        openapi_version="3.1.0",
        summary="The Swarms API, /v1 sandboxes and leases, and the E2B control plane.",
        routes=app.routes,
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in _BODIES.values():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    # no route answers FastAPI's own validation error: bad input is 400 with `ErrorBody`
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    for path in document["paths"].values():
        for operation in path.values():
            operation["responses"].pop("422", None)
            _add_edge_answers(operation)
    document["components"]["securitySchemes"] = SECURITY
    return document


_EDGE = {
    408: "The request's head or body came too slowly (the server's read timeout).",
    413: "The request body is larger than the server takes.",
    500: "The server failed unexpectedly (quote the answer's X-Request-Id).",
}
"""What the edge answers before any route runs, or when one fails unexpectedly."""


def _add_edge_answers(operation: dict[str, Any]) -> None:
    statuses = [408, 500, *([413] if "requestBody" in operation else [])]
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for status in statuses:
        operation["responses"].setdefault(
            str(status), {"description": _EDGE[status], "content": error}
        )
