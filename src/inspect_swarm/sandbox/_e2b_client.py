"""A client of an E2B-compatible server: its control plane (create, kill and list sandboxes)
and each sandbox's daemon (commands over the Connect protocol, files over HTTP)."""

from __future__ import annotations

import base64
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx
from anyio.abc import TaskGroup
from inspect_ai.util import OutputLimitExceededError, SandboxEnvironmentLimits

from ._connection import ENVD_PORT, Connection

_INPUT_CHUNK = 1024 * 1024
_CLIENT_GRACE_SECONDS = 10


class ControlPlane:
    """The server's sandboxes: create, kill and list them."""

    def __init__(self, connection: Connection, client: httpx.AsyncClient) -> None:
        self.connection = connection
        self.client = client
        """The HTTP client of every call, the daemons' too."""

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"X-API-KEY": self.connection.api_key}
        url = self.connection.api_url.rstrip("/") + path
        response = await self.client.request(method, url, headers=headers, **kwargs)
        if response.status_code >= 400 and response.status_code != 404:
            raise RuntimeError(
                f"{method} {url} failed ({response.status_code}): {message_of(response)}"
            )
        return response

    async def create(self, template: str, lifetime: int, metadata: Mapping[str, str]) -> Any:
        """Create a sandbox that lives at most `lifetime` seconds; the server's answer
        (`sandboxID`, `envdAccessToken`...)."""
        body = {"templateID": template, "timeout": lifetime, "metadata": dict(metadata)}
        return (await self._call("POST", "/v2/sandboxes", json=body)).json()

    async def kill(self, sandbox_id: str) -> None:
        """End a sandbox (one already gone is no error)."""
        await self._call("DELETE", f"/sandboxes/{sandbox_id}")

    async def list(self, metadata: Mapping[str, str]) -> list[str]:
        """The ids of the live sandboxes with `metadata`."""
        query = "&".join(f"{k}={v}" for k, v in metadata.items())
        response = await self._call("GET", "/v2/sandboxes", params={"metadata": query})
        return [item["sandboxID"] for item in response.json()]

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.aclose()


class ExecFailed(Exception):
    """The daemon refused to run the command (a Connect error before it started)."""


class SandboxDaemon:
    """One sandbox's daemon (envd): its requests act as `user` unless told otherwise."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        sandbox_id: str,
        token: str | None,
        user: str,
    ) -> None:
        self._client = client
        self._url = url.rstrip("/")
        self._sandbox_id = sandbox_id
        self._token = token
        self._user = user

    async def run(
        self,
        process: dict[str, Any],
        stdin: bytes | None,
        user: str | None,
        time_limit: int | None,
    ) -> tuple[int, bytes, bytes]:
        """Run a command (a `ProcessConfig` as JSON) as `user`, feeding it `stdin`: its exit
        status (128+N for a signal), stdout and stderr.

        Raises ExecFailed when the daemon refuses it, TimeoutError past `time_limit` seconds and
        OutputLimitExceededError past Inspect's output limit.
        """
        headers = self._headers(user) | {"Content-Type": "application/connect+json"}
        if time_limit is not None:
            headers["Connect-Timeout-Ms"] = str(time_limit * 1000)
        output = {"stdout": bytearray(), "stderr": bytearray()}
        grace = None if time_limit is None else time_limit + _CLIENT_GRACE_SECONDS
        with anyio.fail_after(grace):
            end = await self._start(process, stdin, headers, output)
        return _returncode(end), bytes(output["stdout"]), bytes(output["stderr"])

    async def _start(
        self,
        process: dict[str, Any],
        stdin: bytes | None,
        headers: dict[str, str],
        output: dict[str, bytearray],
    ) -> dict[str, Any]:
        """Start the command, feed its input and collect its output; its end event."""
        body = _envelope({"process": process, "stdin": stdin is not None})
        url = f"{self._url}/process.Process/Start"
        failure: Exception | None = None
        async with (
            anyio.create_task_group() as tg,
            self._client.stream("POST", url, content=body, headers=headers) as response,
        ):
            # raised here, an error would reach the caller wrapped in an exception group
            try:
                return await self._follow(response, stdin, output, tg)
            except Exception as ex:
                failure = ex
                tg.cancel_scope.cancel()
        assert failure is not None
        raise failure

    async def _follow(
        self,
        response: httpx.Response,
        stdin: bytes | None,
        output: dict[str, bytearray],
        tg: TaskGroup,
    ) -> dict[str, Any]:
        if response.status_code != 200:
            await response.aread()
            raise ExecFailed(message_of(response))
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        async for flags, message in _envelopes(response.aiter_bytes()):
            if flags & 2:
                _raise_end_of_stream(message)
            event = message.get("event", {})
            if "start" in event and stdin is not None:
                tg.start_soon(self._feed, int(event["start"]["pid"]), stdin)
            elif "data" in event:
                for stream, chunk in event["data"].items():
                    output[stream] += base64.b64decode(chunk)
                    if len(output[stream]) > limit:
                        raise OutputLimitExceededError(
                            SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                            output[stream][:limit].decode(errors="replace"),
                        )
            elif "end" in event:
                return dict(event["end"])
        raise RuntimeError(f"the sandbox {self._sandbox_id} ended the command's stream early")

    async def _feed(self, pid: int, data: bytes) -> None:
        """Send stdin in chunks under the daemon's message limit, then close it."""
        selector = {"pid": pid}

        async def messages() -> AsyncIterator[bytes]:
            yield _envelope({"start": {"process": selector}})
            for at in range(0, len(data), _INPUT_CHUNK):
                chunk = base64.b64encode(data[at : at + _INPUT_CHUNK]).decode()
                yield _envelope({"data": {"input": {"stdin": chunk}}})
            yield _envelope({}, flags=2)

        headers = self._headers(None)
        stream_headers = headers | {"Content-Type": "application/connect+json"}
        url = f"{self._url}/process.Process"
        await self._client.post(f"{url}/StreamInput", content=messages(), headers=stream_headers)
        close_headers = headers | {"Content-Type": "application/json"}
        body = json.dumps({"process": selector})
        await self._client.post(f"{url}/CloseStdin", content=body, headers=close_headers)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write a file (FileNotFoundError, PermissionError... as the daemon says)."""
        response = await self._client.post(
            f"{self._url}/files",
            params={"path": path, "username": self._user},
            content=data,
            headers=self._headers(None) | {"Content-Type": "application/octet-stream"},
        )
        _check_file(response, path)

    async def read_file(self, path: str) -> bytes:
        """Read a file, up to Inspect's limit (OutputLimitExceededError past it)."""
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        data = bytearray()
        async with self._client.stream(
            "GET",
            f"{self._url}/files",
            params={"path": path, "username": self._user},
            headers=self._headers(None),
        ) as response:
            if response.status_code != 200:
                await response.aread()
                _check_file(response, path)
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise OutputLimitExceededError(
                        SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None
                    )
        return bytes(data)

    def _headers(self, user: str | None) -> dict[str, str]:
        who = base64.b64encode(f"{user or self._user}:".encode()).decode()
        headers = {
            "E2b-Sandbox-Id": self._sandbox_id,
            "E2b-Sandbox-Port": str(ENVD_PORT),
            "Authorization": f"Basic {who}",
            "Connect-Protocol-Version": "1",
        }
        if self._token:
            headers["X-Access-Token"] = self._token
        return headers


def message_of(response: httpx.Response) -> str:
    """The message of an E2B error answer (`{"message": ...}`), else its text."""
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return str(body["message"])
    return response.text


def _envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message).encode()
    return bytes([flags]) + len(data).to_bytes(4, "big") + data


async def _envelopes(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """(flags, message) of each message of a Connect stream."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while len(buffer) >= 5:
            size = int.from_bytes(buffer[1:5], "big")
            if len(buffer) < 5 + size:
                break
            yield buffer[0], json.loads(buffer[5 : 5 + size] or b"{}")
            buffer = buffer[5 + size :]


def _returncode(end: Mapping[str, Any]) -> int:
    code = int(end.get("exitCode", 0))
    status = str(end.get("status", ""))
    if code < 0 and status.startswith("signal: "):
        # an E2B daemon that reports a death by signal as -1
        names = {(signal.strsignal(s) or "").lower(): s for s in signal.Signals}
        return 128 + int(names.get(status.removeprefix("signal: "), 0))
    return code


def _raise_end_of_stream(message: Mapping[str, Any]) -> None:
    error = message.get("error")
    if not error:
        return
    code, text = error.get("code"), error.get("message", "")
    if code == "deadline_exceeded":
        raise TimeoutError(f"command timed out: {text}")
    raise ExecFailed(text or str(code))


def _check_file(response: httpx.Response, file: str) -> None:
    if response.status_code < 300:
        return
    message = f"{message_of(response)} (file {file!r})"
    match response.status_code:
        case 404:
            raise FileNotFoundError(message)
        case 403 | 401:
            raise PermissionError(message)
        case 400 if "directory" in message:
            raise IsADirectoryError(message)
    raise RuntimeError(f"file operation on {file!r} failed: {message}")
