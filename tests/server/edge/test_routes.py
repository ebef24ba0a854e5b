"""Every route of the app answers on the event loop."""

from __future__ import annotations

import gc
import inspect
from collections.abc import Iterator, Sequence
from pathlib import Path

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from inspect_swarm.server._serve import assemble
from inspect_swarm.server.edge._app import create_app
from inspect_swarm.server.model._types import Settings
from inspect_swarm.server.records._store import Store
from inspect_swarm.server.sandboxes._isolation import IsolationConfig, SandboxHost


def _calls(dependant: Dependant) -> Iterator[object]:
    yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def _api_routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (included := getattr(route, "original_router", None)) is not None:
            yield from _api_routes(included.routes)  # an included router (FastAPI 0.16x)


def test_no_route_or_dependency_runs_on_a_worker_thread(tmp_path: Path) -> None:
    # FastAPI runs a plain function (endpoint or dependency) on a worker thread: a thread hop
    # and the GIL's hand-over for every request, which stalls the API under load
    store = Store(tmp_path / "swarm.db")
    host = SandboxHost(IsolationConfig(tmp_path / "state", "process"))
    try:
        app = create_app(assemble(store, host, Settings(2)), {"key": frozenset({"read"})})
        routes = list(_api_routes(app.routes))
        assert len(routes) > 20  # the Swarms API's and the E2B control plane's
        sync = [
            f"{sorted(route.methods)} {route.path}: {getattr(call, '__name__', call)}"
            for route in routes
            for call in _calls(route.dependant)
            if call is not None and not inspect.iscoroutinefunction(call)
        ]
        assert sync == []
    finally:
        gc.unfreeze()
        host.cgroups.remove_base()
        store.close()
