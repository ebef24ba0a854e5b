"""What every envd request shares: its sandbox (by header), its access token and its user."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import anyio
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from ...domain._long_lived import LongLivedSandbox
from ...domain._server import SwarmServer
from ...model._rules import (
    BadInput,
    check_command_line,
    check_env,
    check_path,
    check_text,
    refusing,
)
from ...model._types import NotFound
from ...sandboxes._isolation import SandboxError, User
from .._middleware import HttpLimits
from ._file_ops import resolve
from ._wire import E2BError

DEFAULT_USER = "user"
"""E2B's default user, for requests that name none."""
KEEPALIVE_SECONDS = 2.0
"""How often an idle stream carries a keepalive, which is also how soon a client that went
away is noticed (the Connect server only sees a disconnect when it sends)."""

SANDBOX_HEADER = "e2b-sandbox-id"
"""The header that names the sandbox an envd request is for."""
NO_SANDBOX = "missing E2b-Sandbox-Id header: name the sandbox"

_CODES = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    409: Code.ALREADY_EXISTS,
    413: Code.RESOURCE_EXHAUSTED,
    429: Code.RESOURCE_EXHAUSTED,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    507: Code.RESOURCE_EXHAUSTED,
}


def bad_request(bad: BadInput) -> E2BError:
    """A refused input as E2B's 400."""
    return E2BError(400, str(bad))


@contextmanager
def connect_errors() -> Iterator[None]:
    """Answer E2B errors raised inside as the Connect protocol's."""
    try:
        yield
    except E2BError as ex:
        raise ConnectError(connect_code(ex.status), ex.message) from None


def connect_code(status: int) -> Code:
    """The Connect protocol's code for an E2B error's HTTP status."""
    return _CODES.get(status, Code.INTERNAL)


def connect_body(error: E2BError) -> dict[str, str]:
    """An E2B error as the Connect protocol's JSON answer."""
    return {"code": connect_code(error.status).value, "message": error.message}


class Envd:
    """Routes envd requests to sandboxes by the `E2b-Sandbox-Id` header."""

    def __init__(self, server: SwarmServer, max_file: int = HttpLimits.max_file) -> None:
        self._server = server
        self.max_file = max_file
        """The largest file read from a sandbox, in bytes (as large as an upload may be)."""

    def sandbox(self, headers: Mapping[str, str]) -> LongLivedSandbox:
        """The request's sandbox, if its access token is right."""
        sandbox_id = headers.get(SANDBOX_HEADER)
        if not sandbox_id:
            raise E2BError(400, NO_SANDBOX)
        try:
            box = self._server.live_sandbox(sandbox_id)
        except NotFound:
            # what E2B's proxy answers for a sandbox that was killed or timed out
            raise E2BError(502, f"The sandbox was not found: {sandbox_id}") from None
        if not hmac.compare_digest(headers.get("x-access-token", "").encode(), box.token.encode()):
            raise E2BError(401, f"wrong or missing X-Access-Token for sandbox {sandbox_id}")
        if box.paused_at is not None:
            # its processes are frozen: a call would wait on them until it is resumed
            raise E2BError(502, f"sandbox {sandbox_id} is paused: connect to it to resume it")
        return box

    def signed(self, params: Mapping[str, str], operation: str) -> LongLivedSandbox:
        """The sandbox of a signed file URL (`download_url`, `upload_url`): the one whose
        access token makes its signature of path, operation, user (and expiry)."""
        signature = params["signature"]
        expiry = params.get("signature_expiration")
        if expiry is not None:
            if not _WHOLE.fullmatch(expiry):
                raise E2BError(400, f"signature_expiration must be a Unix time, got {expiry!r}")
            if int(expiry) < time.time():
                raise E2BError(401, "the URL's signature has expired: make a new URL")
        fields = [params.get("path", ""), operation, params.get("username", "")]

        def proves(token: str) -> bool:
            made = sign(":".join([*fields, token, *([expiry] if expiry else [])]))
            return hmac.compare_digest(made.encode(), signature.encode())

        box = self._server.signed_sandbox(proves)
        if box is None:
            raise E2BError(
                401,
                f"the URL's signature does not allow this {operation} (wrong, or made for "
                "another path, user or sandbox): make a new URL",
            )
        return box

    def start_soon(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run a task of a sandbox's (a command's relay) beside the server's engine."""
        self._server.start_soon(func, *args)

    @staticmethod
    def path(field: str, path: str, user: User) -> str:
        """A request's path, absolute in the sandbox (relative ones are under the home)."""
        with refusing(bad_request):
            check_path(field, path)
        return resolve(path, user)

    @staticmethod
    def check_command(box: LongLivedSandbox, argv: list[str], env: dict[str, str]) -> None:
        """Refuse a command line no process could start with (400 naming the field)."""
        with refusing(bad_request):
            for i, arg in enumerate(argv):
                check_text("process.cmd" if i == 0 else f"process.args.{i - 1}", arg)
            check_env("process.envs", env)
            check_command_line("process", argv, {**box.env, **env})

    async def user(
        self, box: LongLivedSandbox, headers: Mapping[str, str], name: str | None = None
    ) -> User:
        """The user a request acts as: `name`, else its Basic authorization, else `user`
        (looked up in the sandbox's /etc/passwd on a worker thread, not the event loop)."""
        wanted = name or _basic_user(headers) or DEFAULT_USER
        try:
            return await anyio.to_thread.run_sync(box.sandbox.user, wanted)
        except SandboxError as ex:
            raise E2BError(400, str(ex)) from None
        except ProcessLookupError as ex:  # its PID 1 ended a moment ago: the sandbox with it
            raise E2BError(502, ex.strerror or str(ex)) from None


_WHOLE = re.compile(r"[0-9]{1,12}")


def sign(text: str) -> str:
    """E2B's signature (v1) of a file URL's fields."""
    digest = hashlib.sha256(text.encode()).digest()
    return "v1_" + base64.b64encode(digest).decode().rstrip("=")


def _basic_user(headers: Mapping[str, str]) -> str | None:
    kind, _, value = headers.get("authorization", "").partition(" ")
    if kind.lower() != "basic":
        return None
    try:
        return base64.b64decode(value).decode().partition(":")[0] or None
    except (binascii.Error, UnicodeDecodeError):
        raise E2BError(400, "malformed Basic authorization: send base64('<user>:')") from None
