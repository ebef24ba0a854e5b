"""Mount the E2B surface: control-plane routes, envd routes and the Connect services.

The control plane's routes parse E2B's requests, ask the domain (`SwarmServer`) and answer in
E2B's shape; a domain error raised in one is answered as E2B's `{"code", "message"}`
(`_wire.E2BError.of`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import parse_qsl, unquote

from connectrpc.code import Code
from connectrpc.codec import Codec, proto_binary_codec, proto_json_codec
from connectrpc.errors import ConnectError
from e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication
from e2b.envd.process.process_connect import ProcessASGIApplication
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ...domain._server import SwarmServer
from ...model._keys import Owner
from ...model._rules import (
    check_command_line,
    check_env,
    check_labels,
    parse_addresses,
    parse_allow_list,
    parse_json,
    refusing,
    shown,
)
from ...model._types import DEFAULT_TEMPLATE, Egress, SandboxSpec, Size, SwarmError
from .._auth import PROVISION, READ, Keys, bearer, keys_of
from .._gate import Door, Gate
from .._openapi import E2B_KEYED, Declared
from ._answers import (
    E2BCreateBody,
    E2BCreated,
    E2BDetailed,
    E2BErrorBody,
    E2BForkBody,
    E2BForkResult,
    E2BListed,
    E2BMetric,
    E2BPauseBody,
    E2BResumeBody,
    E2BSnapshot,
    E2BSnapshotBody,
    E2BTimeoutBody,
)
from ._envd import NO_SANDBOX, SANDBOX_HEADER, Envd, bad_request, connect_body
from ._filesystem_service import FilesystemService, read_files, write_files
from ._ports import PortRouter, names_a_port
from ._process_service import ProcessService
from ._wire import E2BError, created, detailed, forked, listed, measured, snapshotted

DEFAULT_TIMEOUT = 300
"""A sandbox's lifetime when its create call names none, as E2B's."""
E2B_SIZE = Size(vcpus=2, memory_gb=1)
"""What one sandbox made through E2B books and may use (E2B's default template has 512 MiB)."""


def mount(app: FastAPI, server: SwarmServer, max_file: int, gate: Gate) -> None:
    """Serve the E2B control plane and sandbox daemon from the server's app, behind `gate`."""
    envd = Envd(server, max_file)
    _close(gate, app.state.keys)

    @app.exception_handler(E2BError)
    async def e2b_error(_: Request, ex: E2BError) -> JSONResponse:
        return JSONResponse(ex.body(), status_code=ex.status)

    app.include_router(_control_plane(server))
    app.include_router(_snapshots(server))
    app.include_router(_daemon(envd))
    codecs = [_Refusing(proto_binary_codec()), _Refusing(proto_json_codec())]
    process = ProcessASGIApplication(ProcessService(envd), codecs=codecs)
    app.mount("/process.Process", _Admitted(process, envd))
    filesystem = FilesystemASGIApplication(FilesystemService(envd), codecs=codecs)
    app.mount("/filesystem.Filesystem", _Admitted(filesystem, envd))
    # last: the paths above are matched first, whatever their method
    app.include_router(_not_offered())
    # outermost: a request for a sandbox's port is the sandbox's, whatever its path
    app.add_middleware(PortRouter, server=server)


_NO_KEY = "missing or unknown API key: send it as X-API-KEY (E2B_API_KEY)"
_CONTROL_PLANE = (
    *("/sandboxes", "/sandboxes/", "/v2/sandboxes", "/v2/sandboxes/"),
    *("/snapshots", "/snapshots/"),
)
"""The control plane's paths (E2B's other paths are answered 501 with or without a key)."""


def _close(gate: Gate, keys: Keys) -> None:
    """The gate's doors: the control plane without a key or with one `keys` do not know,
    the daemon without a sandbox (or a signed URL), answered as the routes behind them
    answer; a sandbox's port is its own."""

    def opens(credential: str) -> bool:
        # as `_owner` takes it: `X-API-KEY`'s value, else a bearer key (an empty one: the
        # route's to judge, with the other header)
        return not credential or keys.lookup(bearer(credential) or credential) is not None

    no_key = E2BError(401, _NO_KEY).body()
    gate.add(Door(_CONTROL_PLANE, ("x-api-key", "authorization"), 401, no_key, opens=opens))
    no_sandbox = E2BError(400, NO_SANDBOX)
    envd = ("/health", "/files")
    gate.add(Door(envd, (SANDBOX_HEADER,), 400, no_sandbox.body(), query=("signature",)))
    services = ("/process.Process/", "/filesystem.Filesystem/")
    gate.add(Door(services, (SANDBOX_HEADER,), 400, connect_body(no_sandbox)))
    gate.forwarded = names_a_port


class _Admitted:
    """A Connect service behind a check of the request's sandbox and access token, made on
    its head alone: the service reads a request's whole body before its handler runs, so a
    caller without a token could otherwise make the server read as much as it sends."""

    def __init__(self, app: ASGIApp, envd: Envd) -> None:
        self._app = app
        self._envd = envd

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self._envd.sandbox(Headers(scope=scope))
            except E2BError as ex:
                await JSONResponse(connect_body(ex), status_code=ex.status)(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _E2BRoute(APIRoute):
    """A route of the control plane: the domain's refusals are answered in E2B's shape, not
    the Swarms API's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except SwarmError as ex:
                raise E2BError.of(ex) from None

        return answer


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


def _owner(request: Request, scope: str) -> Owner:
    """Whose sandboxes the caller reaches, from `X-API-KEY` (the SDK's) or a bearer key."""
    headers = request.headers
    key = headers.get("x-api-key", "") or bearer(headers.get("authorization", "")) or ""
    principal = keys_of(request).identify(request, key.strip()) if key.strip() else None
    if principal is None:
        raise E2BError(401, _NO_KEY)
    if scope not in principal.scopes:
        raise E2BError(403, f"this API key lacks the {scope!r} scope needed here")
    return principal.owner


async def _reader(request: Request) -> Owner:
    return _owner(request, READ)


async def _provisioner(request: Request) -> Owner:
    return _owner(request, PROVISION)


Reader = Annotated[Owner, Depends(_reader)]
"""Whose sandboxes a caller with the `read` scope reaches."""
Provisioner = Annotated[Owner, Depends(_provisioner)]
"""Whose sandboxes a caller with the `provision` scope reaches."""


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


_WHOLE = re.compile(r"[0-9]{1,12}")


def _whole(params: Mapping[str, str], name: str, least: int) -> int | None:
    """A whole-number query parameter of `least` or more, if given."""
    text = params.get(name)
    if not text:
        return None
    if not _WHOLE.fullmatch(text) or int(text) < least:
        raise E2BError(400, f"{name} must be a whole number of {least} or more, got {shown(text)}")
    return int(text)


_STATES = {"running", "paused"}


def _time(params: Mapping[str, str], name: str) -> float | None:
    """An ISO 8601 date and time query parameter as a Unix time, if given (one without a
    zone is UTC)."""
    text = params.get(name)
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise E2BError(
            400, f"{name} must be an ISO 8601 date and time, got {shown(text)}"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _timeout(body: dict[str, Any]) -> int | None:
    """The body's `timeout` in seconds, or None when it has none (absent or null)."""
    value = body.get("timeout")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise E2BError(400, f"timeout must be whole seconds, got {shown(value)}")
    return value


def _pause_on_timeout(body: dict[str, Any]) -> bool:
    """Whether a create asks its timeout to pause the sandbox (`autoPause`, the SDK's
    `lifecycle={"on_timeout": "pause"}`), refusing what this server does not offer."""
    pause = body.get("autoPause", False)
    if not isinstance(pause, bool):
        raise E2BError(400, f"autoPause must be true or false, got {shown(pause)}")
    if pause and body.get("autoPauseMemory", True) is not True:
        raise E2BError(
            400,
            f"autoPauseMemory: {shown(body['autoPauseMemory'])}, but this server pauses "
            'sandboxes with their memory kept only; leave out the on_timeout "mode"',
        )
    resume = body.get("autoResume") or {}
    if not isinstance(resume, dict) or resume.get("enabled", False) is not False:
        raise E2BError(
            400,
            f"autoResume: {shown(resume)}, but this server resumes a paused sandbox only "
            "when asked; leave out auto_resume and connect to the sandbox to resume it",
        )
    return pause


def _check_memory_kept(body: dict[str, Any], option: str) -> None:
    """Refuse a pause or resume without memory (the SDK's `memory: false`)."""
    if body.get("memory", True) is not True:
        raise E2BError(
            400,
            f"memory: {shown(body['memory'])}, but this server pauses and resumes sandboxes "
            f"with their memory kept only; leave out {option}",
        )


def _public_traffic(body: dict[str, Any]) -> bool:
    """Whether the body's `network` leaves the sandbox's ports open to requests without its
    traffic token (E2B's default)."""
    network = body.get("network") or {}
    if not isinstance(network, dict):
        raise E2BError(400, f"network must be an object, got {shown(network)}")
    public = network.get("allowPublicTraffic")
    if public is None:
        return True
    if not isinstance(public, bool):
        raise E2BError(
            400, f"network.allowPublicTraffic must be true or false, got {shown(public)}"
        )
    return public


def _egress(body: dict[str, Any]) -> Egress:
    """What the body asks of the sandbox's way out: `allow_internet_access`, and the
    `network`'s `allowOut` list (addresses and host names) and `denyOut` list (addresses)."""
    internet = body.get("allow_internet_access")
    if internet is not None and not isinstance(internet, bool):
        raise E2BError(400, f"allow_internet_access must be true or false, got {shown(internet)}")
    network = body.get("network") or {}  # an object: `_public_traffic` checked it
    with refusing(bad_request):
        allow, names = parse_allow_list("network.allowOut", network.get("allowOut") or [])
        deny = parse_addresses("network.denyOut", network.get("denyOut") or [])
    return Egress(internet, allow, names, deny)


def _metadata_filter(text: str | None) -> dict[str, str]:
    # the SDK quotes each key and value, then url-encodes the pairs into one parameter
    return {unquote(k): unquote(v) for k, v in parse_qsl(text or "", keep_blank_values=True)}


_LIST_PARAMETERS = [
    {"name": "metadata", "in": "query", "schema": {"type": "string"},
     "description": "Only sandboxes with these labels: url-encoded key=value pairs."},
    {"name": "state", "in": "query", "schema": {"type": "array", "items": {"type": "string"}},
     "description": "Only sandboxes in these states: running, paused (default: both)."},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1},
     "description": "The most sandboxes in one page (default: all)."},
    {"name": "nextToken", "in": "query", "schema": {"type": "string"},
     "description": "The page after the one whose `x-next-token` header gave this."},
]  # fmt: skip
"""The list's query parameters (it reads them itself, refusing a bad one in E2B's shape)."""

_METRICS_PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": "integer", "minimum": 0},
     "description": f"{what} of the samples wanted, in seconds since the epoch (default: {default})."}
    for name, what, default in (("start", "The earliest time", "the first kept"),
                                ("end", "The latest time", "now"))
]  # fmt: skip
"""The metrics' time range."""


def _control_plane(server: SwarmServer) -> APIRouter:
    router = APIRouter(route_class=_E2BRoute)

    route = Declared(router, "e2b", E2B_KEYED)
    error = E2BErrorBody

    @route(
        "POST",
        "/sandboxes",
        "/v2/sandboxes",
        ok={201: E2BCreated},
        errors=(400, 401, 403, 404, 409, 429, 500, 503),
        error=error,
        summary="Create a sandbox",
        body=E2BCreateBody,
        body_required=False,
    )
    async def create(request: Request, owner: Provisioner) -> JSONResponse:
        body = await _body(request)
        template = body.get("templateID") or DEFAULT_TEMPLATE
        if not isinstance(template, str):
            raise E2BError(400, f"templateID must be a string, got {shown(template)}")
        timeout = _timeout(body)
        metadata, env = _strings(body, "metadata"), _strings(body, "envVars")
        with refusing(bad_request):
            check_labels("metadata", metadata)
            check_env("envVars", env)
            check_command_line("envVars", [], env)
        lifetime = DEFAULT_TIMEOUT if timeout is None else timeout
        spec = SandboxSpec(
            template,
            E2B_SIZE,
            lifetime,
            metadata,
            env,
            pause_on_timeout=_pause_on_timeout(body),
            public_traffic=_public_traffic(body),
            egress=_egress(body),
        )
        return JSONResponse(created(await server.start_sandbox(owner, spec)), status_code=201)

    @route(
        "GET",
        "/sandboxes",
        "/v2/sandboxes",
        ok={200: list[E2BListed]},
        errors=(400, 401, 403),
        error=error,
        summary="Live sandboxes",
        extra={"parameters": _LIST_PARAMETERS},
    )
    async def list_sandboxes(request: Request, owner: Reader) -> JSONResponse:
        params = request.query_params
        wanted = _metadata_filter(params.get("metadata"))
        states = {s for p in params.getlist("state") for s in p.split(",") if s}
        if not states <= _STATES:
            raise E2BError(400, f"state must be running or paused, got {shown(sorted(states))}")
        order = params.get("order") or "asc"
        if order not in ("asc", "desc"):
            raise E2BError(400, f"order must be asc or desc, got {shown(order)}")
        template, after = params.get("template"), _time(params, "startedAfter")
        boxes = [
            box
            for box in server.sandboxes(owner, wanted, template, after)
            if not states or box.state in states
        ]
        return _page(
            params, [listed(box) for box in (reversed(boxes) if order == "desc" else boxes)]
        )

    @route(
        "GET",
        "/sandboxes/{sandbox_id}",
        ok={200: E2BDetailed},
        errors=(401, 403, 404),
        error=error,
        summary="A live sandbox",
    )
    async def get_sandbox(sandbox_id: str, owner: Reader) -> dict[str, Any]:
        return detailed(server.live_sandbox(sandbox_id, owner))

    @route(
        "GET",
        "/sandboxes/{sandbox_id}/metrics",
        ok={200: list[E2BMetric]},
        errors=(400, 401, 403, 404),
        error=error,
        summary="A live sandbox's metrics",
        extra={"parameters": _METRICS_PARAMETERS},
    )
    async def metrics(sandbox_id: str, request: Request, owner: Reader) -> list[dict[str, Any]]:
        params = request.query_params
        start, end = _whole(params, "start", 0), _whole(params, "end", 0)
        return [measured(m) for m in server.sandbox_metrics(sandbox_id, owner, start, end)]

    @route(
        "DELETE",
        "/sandboxes/{sandbox_id}",
        ok={204: None},
        errors=(401, 403, 404),
        error=error,
        summary="Kill a sandbox",
    )
    async def kill(sandbox_id: str, owner: Provisioner) -> Response:
        await server.end_sandbox(sandbox_id, owner)
        return Response(status_code=204)

    @route(
        "POST",
        "/sandboxes/{sandbox_id}/timeout",
        ok={204: None},
        errors=(400, 401, 403, 404),
        error=error,
        summary="Set a sandbox's lifetime from now",
        body=E2BTimeoutBody,
    )
    async def set_timeout(sandbox_id: str, request: Request, owner: Provisioner) -> Response:
        timeout = _timeout(await _body(request))
        if timeout is None:
            raise E2BError(400, 'timeout is required: send {"timeout": seconds}')
        server.set_sandbox_timeout(sandbox_id, owner, timeout)
        return Response(status_code=204)

    @route(
        "POST",
        "/sandboxes/{sandbox_id}/connect",
        "/v2/sandboxes/{sandbox_id}/connect",
        ok={200: E2BCreated, 201: E2BCreated},
        errors=(400, 401, 403, 404, 409),
        error=error,
        summary="Connect to a sandbox (resuming it if paused)",
        body=E2BResumeBody,
        body_required=False,
    )
    async def connect(sandbox_id: str, request: Request, owner: Provisioner) -> JSONResponse:
        body = await _body(request)
        timeout = _timeout(body)
        _check_memory_kept(body, "on_resume reboot")
        box, resumed = await server.resume_sandbox(
            sandbox_id, owner, timeout or DEFAULT_TIMEOUT, running_ok=True
        )
        if not resumed and timeout is not None:
            server.set_sandbox_timeout(sandbox_id, owner, timeout)
        return JSONResponse(created(box), status_code=201 if resumed else 200)

    @route(
        "POST",
        "/sandboxes/{sandbox_id}/pause",
        ok={204: None},
        errors=(400, 401, 403, 404, 409, 501),
        error=error,
        summary="Pause a sandbox: its processes frozen, memory kept",
        body=E2BPauseBody,
        body_required=False,
    )
    async def pause(sandbox_id: str, request: Request, owner: Provisioner) -> Response:
        _check_memory_kept(await _body(request), "mode filesystem")
        await server.pause_sandbox(sandbox_id, owner)
        return Response(status_code=204)

    @route(
        "POST",
        "/sandboxes/{sandbox_id}/resume",
        ok={201: E2BCreated},
        errors=(400, 401, 403, 404, 409),
        error=error,
        summary="Resume a paused sandbox",
        body=E2BResumeBody,
        body_required=False,
    )
    async def resume(sandbox_id: str, request: Request, owner: Provisioner) -> JSONResponse:
        timeout = _timeout(await _body(request)) or DEFAULT_TIMEOUT
        box, _ = await server.resume_sandbox(sandbox_id, owner, timeout)
        return JSONResponse(created(box), status_code=201)

    return router


_SNAPSHOTS_PARAMETERS = [
    {"name": "sandboxID", "in": "query", "schema": {"type": "string"},
     "description": "Only the snapshots of this sandbox."},
    {"name": "name", "in": "query", "schema": {"type": "string"},
     "description": "Only the snapshot of this id or name."},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1},
     "description": "The most snapshots in one page (default: all)."},
    {"name": "nextToken", "in": "query", "schema": {"type": "string"},
     "description": "The page after the one whose `x-next-token` header gave this."},
]  # fmt: skip
"""The snapshot list's query parameters."""


def _page(params: Mapping[str, str], found: list[Any]) -> JSONResponse:
    """The page of `found` that `limit` and `nextToken` ask for, with the next page's token
    in `x-next-token` while there is one (the token is the next page's offset)."""
    start = _whole(params, "nextToken", 0) or 0
    limit = _whole(params, "limit", 1) or max(1, len(found))
    more = start + limit < len(found)
    headers = {"x-next-token": str(start + limit)} if more else {}
    return JSONResponse(found[start : start + limit], headers=headers)


def _snapshot_name(body: dict[str, Any]) -> str | None:
    """The body's snapshot `name`, if any, refusing a snapshot with memory (the SDK's
    `mode="full"`): this server copies files only."""
    if body.get("memory", False) is not False:
        raise E2BError(
            400,
            f"memory: {shown(body['memory'])}, but this server snapshots a sandbox's files, "
            'not its memory; pass mode="filesystem" or leave mode out',
        )
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 128):
        raise E2BError(400, f"name must be a string of 1 to 128 characters, got {shown(name)}")
    return name


def _fork_count(body: dict[str, Any]) -> int:
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool):
        raise E2BError(400, f"count must be a whole number, got {shown(count)}")
    return count


def _snapshots(server: SwarmServer) -> APIRouter:
    """Snapshots of sandboxes' files, and forks."""
    router = APIRouter(route_class=_E2BRoute)
    route = Declared(router, "e2b", E2B_KEYED)
    error = E2BErrorBody

    @route(
        "POST",
        "/sandboxes/{sandbox_id}/snapshots",
        ok={201: E2BSnapshot},
        errors=(400, 401, 403, 404, 409, 501, 503),
        error=error,
        summary="Snapshot a sandbox's files (its processes frozen meanwhile)",
        body=E2BSnapshotBody,
        body_required=False,
    )
    async def snapshot(sandbox_id: str, request: Request, owner: Provisioner) -> JSONResponse:
        name = _snapshot_name(await _body(request))
        made = await server.snapshot_sandbox(sandbox_id, owner, name)
        return JSONResponse(snapshotted(made), status_code=201)

    @route(
        "GET",
        "/snapshots",
        ok={200: list[E2BSnapshot]},
        errors=(400, 401, 403),
        error=error,
        summary="Your snapshots",
        extra={"parameters": _SNAPSHOTS_PARAMETERS},
    )
    async def list_snapshots(request: Request, owner: Reader) -> JSONResponse:
        params = request.query_params
        found = server.snapshots(owner, params.get("sandboxID"), params.get("name"))
        return _page(params, [snapshotted(snapshot) for snapshot in found])

    @route(
        "DELETE",
        "/templates/{snapshot_id}",
        ok={204: None},
        errors=(401, 403, 404),
        error=error,
        summary="Delete a snapshot",
    )
    async def delete_snapshot(snapshot_id: str, owner: Provisioner) -> Response:
        await server.delete_snapshot(snapshot_id, owner)
        return Response(status_code=204)

    @route(
        "POST",
        "/sandboxes/{sandbox_id}/fork",
        ok={201: list[E2BForkResult]},
        errors=(400, 401, 403, 404, 409, 501, 503),
        error=error,
        summary="Make sandboxes with a sandbox's files as they are now",
        body=E2BForkBody,
        body_required=False,
    )
    async def fork(sandbox_id: str, request: Request, owner: Provisioner) -> JSONResponse:
        body = await _body(request)
        lifetime = _timeout(body) or DEFAULT_TIMEOUT
        forks = await server.fork_sandbox(sandbox_id, owner, lifetime, _fork_count(body))
        return JSONResponse([forked(made) for made in forks], status_code=201)

    return router


_E2B_API = (
    "sandboxes",
    "v2/sandboxes",
    "snapshots",
    "templates",
    "v2/templates",
    "v3/templates",
    "volumes",
    "secrets",
    "default-templates",
)
"""The paths of E2B's API (each with what lies under it), answered in E2B's shape even
where this server offers nothing."""
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def _not_offered() -> APIRouter:
    """E2B's 501 for the rest of E2B's API: the SDK shows its message (a 404 or 405 in
    another shape would be taken for a missing sandbox, or fail to parse)."""
    # not in the OpenAPI document, which describes what the server offers
    router = APIRouter(include_in_schema=False)

    async def refuse(request: Request) -> Response:
        raise E2BError(
            501,
            f"{request.method} {request.url.path}: this swarm server does not offer it "
            "(its E2B page lists what it offers)",
        )

    for prefix in _E2B_API:
        router.add_api_route(f"/{prefix}", refuse, methods=_METHODS)
        router.add_api_route(f"/{prefix}/{{rest:path}}", refuse, methods=_METHODS)
    return router


def _daemon(envd: Envd) -> APIRouter:
    # not in the OpenAPI document: the daemon speaks E2B's envd protocol, reached at each
    # sandbox's `envdUrl`
    router = APIRouter(include_in_schema=False)

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
