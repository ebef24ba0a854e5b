"""The E2B-compatible surface of the swarm server (extra `e2b`).

The control plane (`/v2/sandboxes`, `/sandboxes/{id}`...) and the sandbox daemon (`/health`,
`/files`, the `process.Process` and `filesystem.Filesystem` Connect services) on the server's
own address, routed by the `E2b-Sandbox-Id` header, so the unmodified e2b SDK works against
it. Without the `e2b` package the server runs without this surface.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ...domain._server import SwarmServer
    from .._gate import Gate


UPLOAD_PATHS = ("/files", "/process.Process/StreamInput")
"""The envd paths whose bodies are uploads (a file, a command's input): their own limit."""


def mount_e2b(app: FastAPI, server: SwarmServer, max_file: int, gate: Gate) -> None:
    """Serve the E2B surface of the server's long-lived sandboxes from `app` when the e2b
    package is installed (`max_file`: the largest file read from a sandbox, in bytes), its
    doors on `gate`."""
    if find_spec("e2b") is None:
        return
    from ._surface import mount

    mount(app, server, max_file, gate)
