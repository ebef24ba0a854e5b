"""Mount the E2B surface: control-plane routes, envd routes and the Connect services."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote

from connectrpc.code import Code
from connectrpc.codec import Codec, proto_binary_codec, proto_json_codec
from connectrpc.errors import ConnectError
from e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from e2b.envd.process.process_connect import ProcessASGIApplication
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .._app import PROVISION, READ, Keys
from .._keys import Owner
from .._limits import check_command_line, check_env, check_labels, parse_json, refusing, shown
from ._envd import Envd, bad_request
from ._filesystem import FilesystemService, read_files, write_files
from ._process import ProcessService
from ._sandboxes import DEFAULT_TIMEOUT, E2BError, E2BSandboxes


def mount(app: FastAPI, sandboxes: E2BSandboxes, keys: Keys, max_file: int) -> None:
    """Serve the E2B control plane and sandbox daemon from the server's app."""
    envd = Envd(sandboxes.engine, sandboxes, max_file)

    @app.exception_handler(E2BError)
    async def e2b_error(_: Request, ex: E2BError) -> JSONResponse:
        return JSONResponse({"code": ex.status, "message": ex.message}, status_code=ex.status)

    app.include_router(_control_plane(sandboxes, keys))
    app.include_router(_daemon(envd))
    codecs = [_Refusing(proto_binary_codec()), _Refusing(proto_json_codec())]
    app.mount("/process.Process", ProcessASGIApplication(ProcessService(envd), codecs=codecs))
    filesystem = FilesystemASGIApplication(FilesystemService(envd), codecs=codecs)
    app.mount("/filesystem.Filesystem", filesystem)


class _Refusing(Codec[Any, Any]):
    """A codec whose decoding errors are the request's (`invalid_argument`), not the
    server's: the Connect server answers any error from a codec as `unknown`, a 500."""

    def __init__(self, codec: Codec[Any, Any]) -> None:
        self._codec = codec

    def name(self) -> str:
        return self._codec.name()

    def encode(self, message: Any) -> bytes:
        return self._codec.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        try:
            return self._codec.decode(data, message_class)
        except Exception as ex:
            raise ConnectError(
                Code.INVALID_ARGUMENT,
                f"the request is not a {message_class.__name__} in {self.name()} ({ex})",
            ) from None


def _owner(keys: Keys, request: Request, scope: str) -> Owner:
    """Whose sandboxes the caller reaches, from `X-API-KEY` (the SDK's) or a bearer key."""
    key = request.headers.get("x-api-key", "")
    kind, _, bearer = request.headers.get("authorization", "").partition(" ")
    key = key or (bearer if kind.lower() == "bearer" else "")
    principal = keys.identify(request, key.strip()) if key.strip() else None
    if principal is None:
        raise E2BError(401, "missing or unknown API key: send it as X-API-KEY (E2B_API_KEY)")
    if scope not in principal.scopes:
        raise E2BError(403, f"this API key lacks the {scope!r} scope needed here")
    return principal.owner


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    with refusing(bad_request):
        body = parse_json(raw) if raw else {}
    if not isinstance(body, dict):
        raise E2BError(400, "the body must be a JSON object")
    return body


def _strings(body: dict[str, Any], name: str) -> dict[str, str]:
    value = body.get(name) or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise E2BError(400, f"{name} must map strings to strings, got {shown(value)}")
    return value


_WHOLE = re.compile(r"[0-9]{1,9}")


def _whole(params: Mapping[str, str], name: str, least: int) -> int | None:
    """A whole-number query parameter of `least` or more, if given."""
    text = params.get(name)
    if not text:
        return None
    if not _WHOLE.fullmatch(text) or int(text) < least:
        raise E2BError(400, f"{name} must be a whole number of {least} or more, got {shown(text)}")
    return int(text)


def _timeout(body: dict[str, Any]) -> int | None:
    """The body's `timeout` in seconds, or None when it has none (absent or null)."""
    value = body.get("timeout")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise E2BError(400, f"timeout must be whole seconds, got {shown(value)}")
    return value


def _metadata_filter(text: str | None) -> dict[str, str]:
    # the SDK quotes each key and value, then url-encodes the pairs into one parameter
    return {unquote(k): unquote(v) for k, v in parse_qsl(text or "", keep_blank_values=True)}


def _control_plane(sandboxes: E2BSandboxes, keys: Keys) -> APIRouter:
    router = APIRouter()

    @router.post("/sandboxes")
    @router.post("/v2/sandboxes")
    async def create(request: Request) -> JSONResponse:
        owner = _owner(keys, request, PROVISION)
        body = await _body(request)
        template = body.get("templateID") or "base"
        if not isinstance(template, str):
            raise E2BError(400, f"templateID must be a string, got {shown(template)}")
        timeout = _timeout(body)
        metadata, env = _strings(body, "metadata"), _strings(body, "envVars")
        with refusing(bad_request):
            check_labels("metadata", metadata)
            check_env("envVars", env)
            check_command_line("envVars", [], env)
        lifetime = DEFAULT_TIMEOUT if timeout is None else timeout
        box = await sandboxes.create(owner, template, lifetime, metadata, env)
        return JSONResponse(box.created(), status_code=201)

    @router.get("/sandboxes")
    @router.get("/v2/sandboxes")
    async def list_sandboxes(request: Request) -> JSONResponse:
        owner = _owner(keys, request, READ)
        params = request.query_params
        wanted = _metadata_filter(params.get("metadata"))
        states = {s for p in params.getlist("state") for s in p.split(",") if s}
        found = [
            box.listed()
            for box in sandboxes.of(owner)
            if wanted.items() <= box.metadata.items() and (not states or "running" in states)
        ]
        # the token is the next page's offset; without a limit, the page is every sandbox
        start = _whole(params, "nextToken", 0) or 0
        limit = _whole(params, "limit", 1) or max(1, len(found))
        page = found[start : start + limit]
        more = start + limit < len(found)
        headers = {"x-next-token": str(start + limit)} if more else {}
        return JSONResponse(page, headers=headers)

    @router.get("/sandboxes/{sandbox_id}")
    async def get(sandbox_id: str, request: Request) -> dict[str, Any]:
        box = sandboxes.get(sandbox_id, _owner(keys, request, READ))
        return {**box.listed(), "envdAccessToken": box.token, "domain": None}

    @router.delete("/sandboxes/{sandbox_id}")
    async def kill(sandbox_id: str, request: Request) -> Response:
        await sandboxes.kill(sandboxes.get(sandbox_id, _owner(keys, request, PROVISION)))
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/timeout")
    async def set_timeout(sandbox_id: str, request: Request) -> Response:
        box = sandboxes.get(sandbox_id, _owner(keys, request, PROVISION))
        timeout = _timeout(await _body(request))
        if timeout is None:
            raise E2BError(400, 'timeout is required: send {"timeout": seconds}')
        sandboxes.set_timeout(box, timeout)
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/connect")
    @router.post("/v2/sandboxes/{sandbox_id}/connect")
    async def connect(sandbox_id: str, request: Request) -> dict[str, Any]:
        box = sandboxes.get(sandbox_id, _owner(keys, request, PROVISION))
        timeout = _timeout(await _body(request))
        if timeout is not None:
            sandboxes.set_timeout(box, timeout)
        return box.created()

    return router


def _daemon(envd: Envd) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health(request: Request) -> Response:
        envd.sandbox(request.headers)
        return Response(status_code=204)

    @router.get("/files")
    async def read(request: Request) -> Response:
        return await read_files(envd, request)

    @router.post("/files")
    async def write(request: Request) -> JSONResponse:
        return await write_files(envd, request)

    return router
