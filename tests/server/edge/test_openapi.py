"""The OpenAPI document at /openapi.json: public, valid OpenAPI 3.1, every route of the Swarms
API, /v1 and the E2B control plane described, the request bodies made from the fields' one
definition. (Every answer in the API tests is checked against it: `conformance`.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute
from openapi_spec_validator import validate

from inspect_swarm._swarms_api import SANDBOX_FIELDS, START_FIELDS
from inspect_swarm.server._serve import assemble
from inspect_swarm.server.edge._app import create_app
from inspect_swarm.server.model._types import Settings
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost

from ...conformance import check
from ...servers import Server, needs_namespaces
from .test_routes import _api_routes


@pytest.fixture
def app_and_document(tmp_path: Path) -> Iterator[tuple[list[APIRoute], dict[str, object]]]:
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state", "process"))
    try:
        app = create_app(assemble(store, host, Settings(2)), {"key": frozenset({"read"})})
        yield list(_api_routes(app.routes)), app.openapi()
    finally:
        store.close()


def test_every_route_but_the_sandbox_daemons_is_described(
    app_and_document: tuple[list[APIRoute], dict[str, dict[str, dict[str, object]]]],
) -> None:
    routes, document = app_and_document
    validate(document)  # type: ignore[arg-type]
    assert document["openapi"] == "3.1.0"  # type: ignore[comparison-overlap]
    described = {
        (method.lower(), route.path)
        for route in routes
        if route.include_in_schema
        for method in route.methods
    }
    in_document = {(m, path) for path, ops in document["paths"].items() for m in ops}
    assert described == in_document
    for expected in ("/api/swarms", "/v1/sandboxes", "/v1/servers/lease", "/v2/sandboxes"):
        assert expected in document["paths"]
    assert "/files" not in document["paths"]  # E2B's daemon: envd's own protocol
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            # bad input is 400 in the API's shape, never FastAPI's 422
            assert "422" not in operation["responses"], (method, path)  # type: ignore[operator]
            assert "500" in operation["responses"], (method, path)  # type: ignore[operator]


def test_the_request_bodies_are_the_fields_one_definition(
    app_and_document: tuple[list[APIRoute], dict[str, dict[str, dict[str, object]]]],
) -> None:
    schemas = app_and_document[1]["components"]["schemas"]
    for model, fields in (("StartBody", START_FIELDS), ("SandboxBody", SANDBOX_FIELDS)):
        properties = schemas[model]["properties"]  # type: ignore[index]
        assert list(properties) == [field.wire for field in fields.values()]
        for field in fields.values():
            assert properties[field.wire]["description"] == field.help
    start = schemas["StartBody"]["properties"]  # type: ignore[index]
    assert start["timeoutSeconds"]["anyOf"][0]["maximum"] == 21600
    assert start["count"]["anyOf"][0]["minimum"] == 1
    assert schemas["StartBody"]["required"] == ["command"]  # type: ignore[index]


def test_the_check_catches_an_answer_unlike_the_document(
    app_and_document: tuple[list[APIRoute], dict[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ... import conformance

    monkeypatch.setattr(conformance, "document", lambda url: app_and_document[1])

    def answer(status: int, body: object, path: str = "/api/swarms/abc") -> None:
        request = httpx.Request("GET", f"http://server{path}")
        check("http://server", request, httpx.Response(status, json=body, request=request))

    answer(404, {"detail": "no such run", "code": "not_found"})
    with pytest.raises(AssertionError, match="unlike the document"):
        answer(200, {"id": "abc"})  # a run without its fields
    with pytest.raises(AssertionError, match="does not list"):
        answer(402, {"detail": "x", "code": "plan_required"})
    with pytest.raises(AssertionError, match="no such operation"):
        answer(200, {}, "/api/nowhere")


@needs_namespaces
def test_the_document_is_served_without_a_key(server: Server) -> None:
    with server.http(key=None) as http:
        answer = http.get("/openapi.json")
    assert answer.status_code == 200
    document = answer.json()
    validate(document)
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    # the same document as the server's app makes: nothing of this server's in it
    assert json.dumps(document).count("127.0.0.1") == 0
