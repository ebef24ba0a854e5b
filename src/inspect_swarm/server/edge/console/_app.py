"""The console's web application: its pages, the fragments that fill them, and its actions.

A page (`/`, `/runs/{id}`, `/sandboxes`, `/sandboxes/{id}`, `/lease`) is a shell that needs
no key: it names the fragment that fills it. The console's script keeps the key signed in
with in the tab's session storage and fetches `/fragments/...` with it as the API's bearer
header, so a fragment holds what that key reaches through the API and nothing more; the
actions (`/actions/...`) change nothing without it. Jinja2 escapes every value, and the
Content-Security-Policy admits the console's own script and stylesheet alone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...domain._long_lived import LongLivedSandbox
from ...domain._server import SwarmServer
from ...model._types import STATUSES, LongLivedRecord, SandboxRecord
from ...records._wire import lease_object, long_lived_object, run_sandbox_object
from .._access_log import AccessLog
from .._app import answer_errors
from .._auth import PROVISION, Keys, Principal, Provisioner, Reader, keys_of
from .._middleware import Edge, HttpLimits
from ._fragments import Fragment, Fragments
from ._live import events
from ._views import (
    RUN_STATUSES,
    duration,
    runs_page,
    sandboxes_page,
    seconds,
)

_HERE = Path(__file__).parent
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""The Content-Security-Policy of every answer: the console's own script, styles and icon."""
_HEADERS = [
    (b"content-security-policy", POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


def create_console(server: SwarmServer, keys: Keys, limits: HttpLimits) -> FastAPI:
    """The console of `server`, accepting the API's `keys` and keeping its `limits`."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.keys = keys
    app.add_middleware(Edge, limits=limits)
    app.add_middleware(AccessLog)
    app.add_middleware(_Secured)
    answer_errors(app)
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    env = _templates()
    _pages(app, env)
    _Console(server, env).mount(app)
    return app


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(_HERE / "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        auto_reload=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = duration
    env.globals["with_page"] = _with_page
    return env


def _with_page(query: Mapping[str, str], number: int) -> str:
    """The query of a page's address, at page `number`."""
    return "?" + urlencode({**query, "page": number})


_PAGES = {
    "/": ("runs", "/fragments/runs"),
    "/runs/{item}": ("run", "/fragments/runs/{item}"),
    "/sandboxes": ("sandboxes", "/fragments/sandboxes"),
    "/sandboxes/{item}": ("sandbox", "/fragments/sandboxes/{item}"),
    "/lease": ("lease", "/fragments/lease"),
}
"""Each page's path, its name, and the fragment that fills it."""


def _pages(app: FastAPI, env: Environment) -> None:
    shell = env.get_template("shell.html")
    for path, (name, fragment) in _PAGES.items():
        app.add_api_route(path, _shell(shell.render, name, fragment), methods=["GET"])


def _shell(render: Callable[..., str], name: str, fragment: str) -> Callable[..., Any]:
    async def page(request: Request) -> HTMLResponse:
        item = request.path_params.get("item", "")
        html = render(
            page=name,
            fragment=fragment.format(item=item),
            query=request.query_params,
            run_statuses=RUN_STATUSES,
            sandbox_statuses=STATUSES,
        )
        return HTMLResponse(html)

    return page


class _Console:
    """The fragments and actions of one server's console."""

    def __init__(self, server: SwarmServer, env: Environment) -> None:
        self._server = server
        self._env = env
        self._fragments = Fragments()

    def mount(self, app: FastAPI) -> None:
        get, post = app.get, app.post
        get("/fragments/runs")(self.runs)
        get("/fragments/runs/{run_id}")(self.run)
        get("/fragments/sandboxes")(self.sandboxes)
        get("/fragments/sandboxes/{sandbox_id}")(self.sandbox)
        get("/fragments/lease")(self.lease)
        get("/files/runs/{run_id}/results.jsonl")(self.results)
        post("/actions/runs/{run_id}/cancel")(self.cancel)
        post("/actions/sandboxes/{sandbox_id}/kill")(self.kill)
        post("/actions/lease/release")(self.release)

    def _answer(
        self,
        request: Request,
        who: Principal,
        template: str,
        context: Callable[[], dict[str, Any]],
        of_runs: bool = False,
    ) -> Response:
        """A fragment for `who`, rendered afresh unless a console asked for it a moment ago
        (or, `of_runs`, no run changed since): kept up to date as a stream of events when the
        request accepts them, else once (304 when the caller has it already)."""
        key: Hashable = (who.owner, who.scopes, request.url.path, request.url.query)
        query = dict(request.query_params)

        def look() -> Fragment:
            version = self._server.run_changes if of_runs else None
            render = lambda: self._render(template, who, query, context())  # noqa: E731
            return self._fragments.get(key, render, version)

        made = look()  # a refusal (an unknown run, say) is answered here, with its status
        headers = {"ETag": made.etag, "Cache-Control": "no-store"}
        if "text/event-stream" in request.headers.get("accept", ""):
            stream = events(keys_of(request), who, look, made)
            return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
        if request.headers.get("if-none-match") == made.etag:
            return Response(status_code=304, headers=headers)
        return Response(made.body, media_type="text/html; charset=utf-8", headers=headers)

    def _render(
        self, template: str, who: Principal, query: Mapping[str, str], context: dict[str, Any]
    ) -> str:
        return self._env.get_template(template).render(
            can_act=PROVISION in who.scopes, api=self._server.url, query=query, **context
        )

    # fragments

    async def runs(
        self, request: Request, who: Reader, status: str = "", q: str = "", page: int = 1
    ) -> Response:
        def context() -> dict[str, Any]:
            runs = self._server.run_records(who.owner)
            shown = runs_page(runs, status, q, page, self._server.run_summary)
            return {"page": shown, "total": len(runs)}

        return self._answer(request, who, "runs.html", context, of_runs=True)

    async def run(
        self, request: Request, run_id: str, who: Reader, status: str = "", page: int = 1
    ) -> Response:
        def context() -> dict[str, Any]:
            view = self._server.run(run_id, who.owner)
            return {
                "run": view.summary(),
                "counts": view.counts,
                "page": sandboxes_page(view.sandboxes, status, page),
                "chosen": status,
            }

        return self._answer(request, who, "run.html", context, of_runs=True)

    async def sandboxes(self, request: Request, who: Reader) -> Response:
        def context() -> dict[str, Any]:
            live = reversed(self._server.sandboxes(who.owner))
            return {"sandboxes": [long_lived_object(box.record()) for box in live]}

        return self._answer(request, who, "sandboxes.html", context)

    async def sandbox(self, request: Request, sandbox_id: str, who: Reader) -> Response:
        def context() -> dict[str, Any]:
            return {"sandbox": _sandbox(self._server.sandbox(sandbox_id, who.owner))}

        return self._answer(request, who, "sandbox.html", context)

    async def lease(self, request: Request, who: Reader) -> Response:
        def context() -> dict[str, Any]:
            state = self._server.state(who.owner, who.key)
            # the lease's key is the API's to show: the page has no use for it
            lease = None if state.lease is None else lease_object(replace(state.lease, key=None))
            return {"state": state.state, "memory": state.memory_gib, "lease": lease}

        return self._answer(request, who, "lease.html", context)

    async def results(self, run_id: str, who: Reader) -> Response:
        results = self._server.run(run_id, who.owner).results()
        disposition = f'attachment; filename="{run_id}-results.jsonl"'
        return Response(
            results,
            media_type="application/x-ndjson",
            headers={"Content-Disposition": disposition, "Cache-Control": "no-store"},
        )

    # actions

    async def cancel(self, run_id: str, who: Provisioner) -> JSONResponse:
        self._server.cancel(run_id, who.owner)
        return self._done(f"run {run_id} cancelled")

    async def kill(self, sandbox_id: str, who: Provisioner) -> JSONResponse:
        await self._server.kill_sandbox(sandbox_id, who.owner)
        return self._done(f"sandbox {sandbox_id} ended")

    async def release(self, who: Provisioner) -> JSONResponse:
        self._server.release(who.owner)
        return self._done("lease released")

    def _done(self, message: str) -> JSONResponse:
        self._fragments.clear()  # what any console shows next is after the change
        return JSONResponse({"message": message})


def _sandbox(found: SandboxRecord | LongLivedSandbox | LongLivedRecord) -> dict[str, Any]:
    """A sandbox as its page shows it: a run's, or a long-lived one (never its daemon's
    token)."""
    if isinstance(found, SandboxRecord):
        obj = run_sandbox_object(found)
        return {**obj, "seconds": seconds(found.started_at, found.ended_at), "kind": "run"}
    record = found.record() if isinstance(found, LongLivedSandbox) else found
    obj = long_lived_object(record)
    return {**obj, "seconds": seconds(record.started_at, record.ended_at), "kind": "long-lived"}


class _Secured:
    """ASGI middleware that gives every answer the console's security headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, sending)
