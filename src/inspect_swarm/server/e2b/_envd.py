"""What every envd request shares: its sandbox (by header), its access token and its user."""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from .._engine import Engine
from .._isolation import SandboxError, User
from ._sandboxes import E2BError, E2BSandbox, E2BSandboxes

DEFAULT_USER = "user"
"""E2B's default user, for requests that name none."""

_CODES = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    409: Code.ALREADY_EXISTS,
    502: Code.UNAVAILABLE,
    429: Code.RESOURCE_EXHAUSTED,
}


@contextmanager
def connect_errors() -> Iterator[None]:
    """Answer E2B errors raised inside as the Connect protocol's."""
    try:
        yield
    except E2BError as ex:
        raise ConnectError(_CODES.get(ex.status, Code.INTERNAL), ex.message) from None


class Envd:
    """Routes envd requests to sandboxes by the `E2b-Sandbox-Id` header."""

    def __init__(self, engine: Engine, sandboxes: E2BSandboxes) -> None:
        self.engine = engine
        self.sandboxes = sandboxes

    def sandbox(self, headers: Mapping[str, str]) -> E2BSandbox:
        """The request's sandbox, if its access token is right."""
        sandbox_id = headers.get("e2b-sandbox-id")
        if not sandbox_id:
            raise E2BError(400, "missing E2b-Sandbox-Id header: name the sandbox")
        try:
            box = self.sandboxes.get(sandbox_id)
        except E2BError:
            # what E2B's proxy answers for a sandbox that was killed or timed out
            raise E2BError(502, f"The sandbox was not found: {sandbox_id}") from None
        if not hmac.compare_digest(headers.get("x-access-token", "").encode(), box.token.encode()):
            raise E2BError(401, f"wrong or missing X-Access-Token for sandbox {sandbox_id}")
        return box

    def user(self, box: E2BSandbox, headers: Mapping[str, str], name: str | None = None) -> User:
        """The user a request acts as: `name`, else its Basic authorization, else `user`."""
        try:
            return box.sandbox.user(name or _basic_user(headers) or DEFAULT_USER)
        except SandboxError as ex:
            raise E2BError(400, str(ex)) from None
        except ProcessLookupError as ex:  # its PID 1 ended a moment ago: the sandbox with it
            raise E2BError(502, ex.strerror or str(ex)) from None


def _basic_user(headers: Mapping[str, str]) -> str | None:
    kind, _, value = headers.get("authorization", "").partition(" ")
    if kind.lower() != "basic":
        return None
    try:
        return base64.b64decode(value).decode().partition(":")[0] or None
    except (binascii.Error, UnicodeDecodeError):
        raise E2BError(400, "malformed Basic authorization: send base64('<user>:')") from None
