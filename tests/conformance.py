"""Every answer a test gets from a server, checked against the server's own OpenAPI document:
its path and method are described, its status is one the operation lists, and its body has
the media type and the shape the document gives for that status."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

UNDESCRIBED = ("/openapi.json", "/health", "/files", "/process.Process/", "/filesystem.Filesystem/")
"""Paths the document leaves out: itself, and E2B's sandbox daemon (envd's own protocol)."""


@cache
def document(url: str) -> dict[str, Any]:
    """The server's document, valid OpenAPI 3.1 (fetched once per server)."""
    found = httpx.get(f"{url}/openapi.json", timeout=30)
    assert found.status_code == 200, found.text
    doc: dict[str, Any] = found.json()
    assert doc["openapi"].startswith("3.1")
    validate(doc)
    return doc


def _operation(doc: dict[str, Any], method: str, path: str) -> dict[str, Any] | None:
    for template, operations in doc["paths"].items():
        parts = re.split(r"(\{[^}]+\})", template)
        pattern = "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts)
        if re.fullmatch(pattern, path) and method.lower() in operations:
            operation: dict[str, Any] = operations[method.lower()]
            return operation
    return None


def check(url: str, request: httpx.Request, response: httpx.Response) -> None:
    """Fail unless `response` (read) to `request` is as the document of the server at `url`
    says."""
    path = request.url.path
    if path.startswith(UNDESCRIBED):
        return
    doc = document(url)
    operation = _operation(doc, request.method, path)
    where = f"{request.method} {path} answered {response.status_code}"
    if operation is None:
        # no route: the document cannot describe what is not there
        assert response.status_code in (404, 405), f"{where}: the document has no such operation"
        return
    described = operation["responses"].get(str(response.status_code))
    assert described is not None, f"{where}, a status the document does not list"
    content = described.get("content")
    if content is None:
        assert not response.content, f"{where} with a body the document does not describe"
        return
    media = response.headers.get("content-type", "").split(";")[0]
    assert media in content, f"{where} as {media!r}; the document gives {sorted(content)}"
    schema = content[media].get("schema", {})
    if media == "application/json" and schema:
        # the schema's references are to the document's components
        validator = Draft202012Validator({**schema, "components": doc["components"]})
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in
                  validator.iter_errors(json.loads(response.content))]  # fmt: skip
        assert not errors, f"{where} with a body unlike the document's: {errors[:3]}"


class ConformingTransport(httpx.HTTPTransport):
    """An httpx transport that checks each answer against the server's document."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        check(self._url, request, response)
        return response
