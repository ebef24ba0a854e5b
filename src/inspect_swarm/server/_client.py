"""A client for the Swarms API (this package's server or a hosted one), sync and async.

Both clients share everything but sending and sleeping: each call is described once
(`_Call`), and one `_Attempts` per call builds its request, decides whether and when to
resend it, and turns the final answer into a result or a typed error.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import anyio
import httpx

logger = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.maritime.sh"
DEFAULT_POLL_INTERVAL = 3.0
_MAX_BACKOFF = 8.0
_MAX_RETRY_AFTER = 60.0
_RUNNING = ("queued", "booting", "running")


class SwarmsAPIError(Exception):
    """An error answer of the Swarms API (or a failure to reach it, with status 0)."""

    def __init__(self, status: int, code: str, message: str, request_id: str | None = None):
        super().__init__(f"{status} {code}: {message}" if status else message)
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id


class AuthenticationError(SwarmsAPIError):
    """401 or 403: the key is missing, unknown, or lacks a scope (`provision`)."""


class PlanRequiredError(SwarmsAPIError):
    """402: the account (or server) does not offer Swarms."""


class NotFoundError(SwarmsAPIError):
    """404: no such run, sandbox or lease."""


class ConflictError(SwarmsAPIError):
    """409: `server_busy` (another account rents the server) or `idempotency_conflict`."""


class RateLimitError(SwarmsAPIError):
    """429: too many requests (retried first, honouring Retry-After)."""


class APIConnectionError(SwarmsAPIError):
    """The API could not be reached (retried first when that is safe)."""


_ERRORS: dict[int, type[SwarmsAPIError]] = {
    401: AuthenticationError,
    403: AuthenticationError,
    402: PlanRequiredError,
    404: NotFoundError,
    409: ConflictError,
    429: RateLimitError,
}


def parse_size(size: str | Mapping[str, int] | None) -> dict[str, int] | None:
    """`"2x4"` (vCPUs x GB) or `{"vcpus": 2, "memoryGb": 4}` as the API's size object."""
    if size is None or isinstance(size, Mapping):
        return None if size is None else dict(size)
    vcpus, sep, memory = size.lower().partition("x")
    if not sep or not vcpus.isdigit() or not memory.isdigit():
        raise ValueError(f"size: expected VCPUSxGB such as '2x4', got {size!r}")
    return {"vcpus": int(vcpus), "memoryGb": int(memory)}


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    safe_to_retry: bool = True
    """Whether resending after a lost connection cannot do the work twice."""
    parse: Callable[[httpx.Response], Any] = lambda r: r.json()


def _start_call(
    command: str | Sequence[str],
    *,
    count: int | None,
    inputs: Sequence[Mapping[str, Any]] | None,
    size: str | Mapping[str, int] | None,
    timeout_seconds: int | None,
    concurrency: int | None,
    env: Mapping[str, str] | None,
    files: Mapping[str, str] | None,
    template: str | None,
    image: str | None,
    result_path: str | None,
    name: str | None,
    idempotency_key: str | None,
) -> _Call:
    body: dict[str, Any] = {"command": command if isinstance(command, str) else list(command)}
    optional = {
        "count": count,
        "inputs": None if inputs is None else [dict(i) for i in inputs],
        "size": parse_size(size),
        "timeoutSeconds": timeout_seconds,
        "concurrency": concurrency,
        "env": None if env is None else dict(env),
        "files": None if files is None else dict(files),
        "template": template,
        "image": image,
        "resultPath": result_path,
        "name": name,
    }
    body.update(_given(optional))
    key = idempotency_key or str(uuid.uuid4())
    return _Call("POST", "/api/swarms", body, {"Idempotency-Key": key})


def _given(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a body that were given (None leaves a field out)."""
    return {name: value for name, value in fields.items() if value is not None}


def _items(name: str) -> Callable[[httpx.Response], list[dict[str, Any]]]:
    """Parse a listing: a bare list, or one under `name` (or `data`, `items`)."""

    def parse(response: httpx.Response) -> list[dict[str, Any]]:
        data = response.json()
        if isinstance(data, list):
            return data
        for key in (name, "data", "items"):
            if isinstance(data.get(key), list):
                return list(data[key])
        return []

    return parse


def _jsonl(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def is_finished(run: Mapping[str, Any]) -> bool:
    """Whether a run has ended (every sandbox done)."""
    if run.get("count") is not None and run.get("done") == run.get("count"):
        return True
    return run.get("status") not in _RUNNING


def _error_for(response: httpx.Response) -> SwarmsAPIError:
    code, message = f"http_{response.status_code}", response.reason_phrase
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error", data.get("detail"))
        if isinstance(inner, dict):
            code = str(inner.get("code", code))
            message = str(inner.get("message", inner.get("detail", message)))
        else:
            code = str(data.get("code", code))
            message = str(data.get("message", inner if inner is not None else message))
    request_id = response.headers.get("x-request-id")
    error = _ERRORS.get(response.status_code, SwarmsAPIError)
    return error(response.status_code, code, message, request_id)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return min(float(value), _MAX_RETRY_AFTER)
    except ValueError:
        try:
            delay = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
        return min(max(delay, 0.0), _MAX_RETRY_AFTER)


class _Settings:
    def __init__(
        self, api_key: str | None, base_url: str | None, max_retries: int, poll_interval: float
    ) -> None:
        key = api_key or os.environ.get("MARITIME_API_KEY")
        if not key:
            raise ValueError("api_key: no API key given; pass api_key=... or set MARITIME_API_KEY")
        self.api_key = key
        self.base_url = base_url or os.environ.get("MARITIME_API_URL") or DEFAULT_API_URL
        self.base_url = self.base_url.rstrip("/")
        if max_retries < 0:
            raise ValueError(f"max_retries: must be 0 or more, got {max_retries}")
        self.max_retries = max_retries
        self.poll_interval = poll_interval

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", "User-Agent": "inspect-swarm"}


class _Attempts:
    """One call's attempts: its request, when to resend it, and what its answer means."""

    def __init__(
        self, call: _Call, http: httpx.Client | httpx.AsyncClient, settings: _Settings
    ) -> None:
        self.call = call
        self.request = http.build_request(
            call.method, call.path, json=call.body, headers=call.headers
        )
        self._settings = settings
        self._number = 0

    def retry_delay(self, answer: httpx.Response | httpx.TransportError) -> float | None:
        """Seconds to wait before resending after `answer`, or None when it is final."""
        if self._number >= self._settings.max_retries:
            return None
        if isinstance(answer, httpx.TransportError):
            # lost on the way: resend only what cannot do the work twice
            retry = self.call.safe_to_retry
        elif answer.status_code in (429, 503):
            retry = True  # the request was not processed
        else:
            retry = answer.status_code >= 500 and self.call.method in ("GET", "DELETE")
        if not retry:
            return None
        backoff = min(0.5 * 2**self._number, _MAX_BACKOFF)
        self._number += 1
        after = None if isinstance(answer, httpx.TransportError) else _retry_after(answer)
        delay = backoff if after is None else after
        logger.debug("retrying %s %s in %.1fs", self.call.method, self.call.path, delay)
        return delay

    def result(self, answer: httpx.Response | httpx.TransportError) -> Any:
        """The call's result from its final answer, or its typed error."""
        if isinstance(answer, httpx.TransportError):
            message = f"cannot reach {self._settings.base_url}: {answer}"
            raise APIConnectionError(0, "connection_error", message) from answer
        if answer.is_success:
            return self.call.parse(answer)
        raise _error_for(answer)


class SwarmsClient:
    """A blocking client for the Swarms API.

    Args:
        api_key: The API key (default: `MARITIME_API_KEY`).
        base_url: The API's address (default: `MARITIME_API_URL`, else the hosted API).
        timeout: Seconds to wait for each HTTP request.
        max_retries: How many times to resend after a connection error, 429 or 503.
        poll_interval: Seconds between polls in `swarms.wait` (the spec's SDKs use 3).
        transport: An httpx transport to use instead of the network (for tests).
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._settings = _Settings(api_key, base_url, max_retries, poll_interval)
        self._http = httpx.Client(
            base_url=self._settings.base_url,
            timeout=timeout,
            headers=self._settings.headers(),
            transport=transport,
        )
        self.swarms = Swarms(self)
        self.servers = Servers(self)
        self.sandboxes = Sandboxes(self)

    def __enter__(self) -> SwarmsClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def _send(self, call: _Call) -> Any:
        attempts = _Attempts(call, self._http, self._settings)
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = self._http.send(attempts.request)
            except httpx.TransportError as ex:
                answer = ex
            delay = attempts.retry_delay(answer)
            if delay is None:
                return attempts.result(answer)
            time.sleep(delay)


class AsyncSwarmsClient:
    """The Swarms API client for async code (asyncio or trio), on httpx.

    Takes the same arguments as `SwarmsClient`, with an async httpx transport.
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = _Settings(api_key, base_url, max_retries, poll_interval)
        self._http = httpx.AsyncClient(
            base_url=self._settings.base_url,
            timeout=timeout,
            headers=self._settings.headers(),
            transport=transport,
        )
        self.swarms = AsyncSwarms(self)
        self.servers = AsyncServers(self)
        self.sandboxes = AsyncSandboxes(self)

    async def __aenter__(self) -> AsyncSwarmsClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        attempts = _Attempts(call, self._http, self._settings)
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = await self._http.send(attempts.request)
            except httpx.TransportError as ex:
                answer = ex
            delay = attempts.retry_delay(answer)
            if delay is None:
                return attempts.result(answer)
            await anyio.sleep(delay)


class _Calls:
    """The calls of the API, described once for both clients."""

    @staticmethod
    def get(run_id: str) -> _Call:
        return _Call("GET", f"/api/swarms/{run_id}")

    @staticmethod
    def list() -> _Call:
        return _Call("GET", "/api/swarms", parse=_items("swarms"))

    @staticmethod
    def cancel(run_id: str) -> _Call:
        return _Call("POST", f"/api/swarms/{run_id}/cancel")

    @staticmethod
    def results(run_id: str) -> _Call:
        return _Call("GET", f"/api/swarms/{run_id}/results", parse=_jsonl)

    @staticmethod
    def access() -> _Call:
        return _Call("GET", "/api/swarms/access")

    @staticmethod
    def servers() -> _Call:
        return _Call("GET", "/v1/servers")

    @staticmethod
    def lease() -> _Call:
        return _Call("POST", "/v1/servers/lease")

    @staticmethod
    def release() -> _Call:
        return _Call("DELETE", "/v1/servers/lease")

    @staticmethod
    def create_sandbox(
        template: str | None,
        size: str | Mapping[str, int] | None,
        timeout_seconds: int | None,
        env: Mapping[str, str] | None,
        metadata: Mapping[str, str] | None,
    ) -> _Call:
        fields = {
            "template": template,
            "size": parse_size(size),
            "timeoutSeconds": timeout_seconds,
            "env": None if env is None else dict(env),
            "metadata": None if metadata is None else dict(metadata),
        }
        return _Call("POST", "/v1/sandboxes", _given(fields), safe_to_retry=False)

    @staticmethod
    def sandbox(sandbox_id: str) -> _Call:
        return _Call("GET", f"/v1/sandboxes/{sandbox_id}")

    @staticmethod
    def sandboxes() -> _Call:
        return _Call("GET", "/v1/sandboxes", parse=_items("sandboxes"))

    @staticmethod
    def kill_sandbox(sandbox_id: str) -> _Call:
        return _Call("DELETE", f"/v1/sandboxes/{sandbox_id}")


class Swarms:
    """`client.swarms`: start, follow, cancel and collect swarm runs."""

    def __init__(self, client: SwarmsClient) -> None:
        self._client = client

    def start(
        self,
        command: str | Sequence[str],
        *,
        count: int | None = None,
        inputs: Sequence[Mapping[str, Any]] | None = None,
        size: str | Mapping[str, int] | None = None,
        timeout_seconds: int | None = None,
        concurrency: int | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        template: str | None = None,
        image: str | None = None,
        result_path: str | None = None,
        name: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Start a run of `command` on `count` sandboxes (or one per input).

        Sends an Idempotency-Key (`idempotency_key`, else a new one kept across this call's
        own retries), so a retried start returns the same run.

        Args:
            command: A shell command, or a list of arguments.
            count: How many sandboxes (leave out when giving `inputs`).
            inputs: One `{"args", "env", "files"}` per sandbox.
            size: `"2x4"` or `{"vcpus": 2, "memoryGb": 4}` (default 2 vCPU, 4 GB).
            timeout_seconds: How long each sandbox's command may run (10 to 21,600).
            concurrency: The most sandboxes at once (default: as many as fit).
            env: Variables for every sandbox.
            files: Files (absolute path to content) written in every sandbox.
            template: The sandbox template (default `base`).
            image: An OCI image reference instead of a template.
            result_path: An absolute path read back after the command (up to 64 KB).
            name: The run's name.
            idempotency_key: The key to send (default: a new UUID).

        Returns:
            The run, as the API's dict.
        """
        call = _start_call(
            command,
            count=count,
            inputs=inputs,
            size=size,
            timeout_seconds=timeout_seconds,
            concurrency=concurrency,
            env=env,
            files=files,
            template=template,
            image=image,
            result_path=result_path,
            name=name,
            idempotency_key=idempotency_key,
        )
        return dict(self._client._send(call))

    def get(self, run_id: str) -> dict[str, Any]:
        """The run with every sandbox."""
        return dict(self._client._send(_Calls.get(run_id)))

    def list(self) -> list[dict[str, Any]]:
        """Your runs, newest first."""
        return list(self._client._send(_Calls.list()))

    def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a run: queued sandboxes never start, running ones stop."""
        return dict(self._client._send(_Calls.cancel(run_id)))

    def results(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """One dict per sandbox, in input order."""
        return list(self._client._send(_Calls.results(run_id)))

    def access(self) -> dict[str, Any]:
        """Whether the account has Swarms."""
        return dict(self._client._send(_Calls.access()))

    def wait(
        self,
        run_id: str,
        *,
        poll_interval: float | None = None,
        timeout: float | None = None,
        on_update: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the run until it ends and return it.

        Args:
            run_id: The run.
            poll_interval: Seconds between polls (default: the client's, 3).
            timeout: Give up with TimeoutError after this many seconds.
            on_update: Called with the run after every poll.
        """
        interval = poll_interval or self._client._settings.poll_interval
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if on_update is not None:
                on_update(run)
            if is_finished(run):
                return run
            if deadline is not None and time.monotonic() + interval > deadline:
                raise TimeoutError(f"swarm run {run_id} still running after {timeout}s")
            time.sleep(interval)


class AsyncSwarms:
    """`client.swarms` of the async client (the same calls, awaited)."""

    def __init__(self, client: AsyncSwarmsClient) -> None:
        self._client = client

    async def start(
        self,
        command: str | Sequence[str],
        *,
        count: int | None = None,
        inputs: Sequence[Mapping[str, Any]] | None = None,
        size: str | Mapping[str, int] | None = None,
        timeout_seconds: int | None = None,
        concurrency: int | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        template: str | None = None,
        image: str | None = None,
        result_path: str | None = None,
        name: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Start a run (see `Swarms.start`)."""
        call = _start_call(
            command,
            count=count,
            inputs=inputs,
            size=size,
            timeout_seconds=timeout_seconds,
            concurrency=concurrency,
            env=env,
            files=files,
            template=template,
            image=image,
            result_path=result_path,
            name=name,
            idempotency_key=idempotency_key,
        )
        return dict(await self._client._send(call))

    async def get(self, run_id: str) -> dict[str, Any]:
        """The run with every sandbox."""
        return dict(await self._client._send(_Calls.get(run_id)))

    async def list(self) -> list[dict[str, Any]]:
        """Your runs, newest first."""
        return list(await self._client._send(_Calls.list()))

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a run."""
        return dict(await self._client._send(_Calls.cancel(run_id)))

    async def results(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """One dict per sandbox, in input order."""
        return list(await self._client._send(_Calls.results(run_id)))

    async def access(self) -> dict[str, Any]:
        """Whether the account has Swarms."""
        return dict(await self._client._send(_Calls.access()))

    async def wait(
        self,
        run_id: str,
        *,
        poll_interval: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the same call as the sync client's)
        on_update: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the run until it ends and return it (see `Swarms.wait`)."""
        interval = poll_interval or self._client._settings.poll_interval
        with anyio.fail_after(timeout):
            while True:
                run = await self.get(run_id)
                if on_update is not None:
                    on_update(run)
                if is_finished(run):
                    return run
                await anyio.sleep(interval)


class Servers:
    """`client.servers`: the swarm servers and your lease."""

    def __init__(self, client: SwarmsClient) -> None:
        self._client = client

    def list(self) -> dict[str, Any]:
        """Every server and its state, your open lease, and whether you may rent one."""
        return dict(self._client._send(_Calls.servers()))

    def lease(self) -> dict[str, Any]:
        """Rent a free server, or return the one you rent."""
        return dict(self._client._send(_Calls.lease()))

    def release(self) -> dict[str, Any]:
        """Release your server: every sandbox on it ends."""
        return dict(self._client._send(_Calls.release()))


class AsyncServers:
    """`client.servers` of the async client."""

    def __init__(self, client: AsyncSwarmsClient) -> None:
        self._client = client

    async def list(self) -> dict[str, Any]:
        """Every server and its state, your open lease, and whether you may rent one."""
        return dict(await self._client._send(_Calls.servers()))

    async def lease(self) -> dict[str, Any]:
        """Rent a free server, or return the one you rent."""
        return dict(await self._client._send(_Calls.lease()))

    async def release(self) -> dict[str, Any]:
        """Release your server: every sandbox on it ends."""
        return dict(await self._client._send(_Calls.release()))


class Sandboxes:
    """`client.sandboxes`: long-lived sandboxes on your server, and any sandbox's record."""

    def __init__(self, client: SwarmsClient) -> None:
        self._client = client

    def create(
        self,
        *,
        template: str | None = None,
        size: str | Mapping[str, int] | None = None,
        timeout_seconds: int | None = None,
        env: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Start a sandbox on your server that lives until killed, timed out or released.

        It is used through the E2B API (its `sandboxId`, `envdUrl` and `envdAccessToken`).
        A lost connection is not retried: the sandbox may have started.

        Args:
            template: The sandbox template (default `base`).
            size: `"2x4"` or `{"vcpus": 2, "memoryGb": 4}` (default 2 vCPU, 4 GB).
            timeout_seconds: How long it lives (default 600).
            env: Variables for every command in it.
            metadata: Your labels, shown with it.

        Returns:
            The sandbox, as the API's dict.
        """
        call = _Calls.create_sandbox(template, size, timeout_seconds, env, metadata)
        return dict(self._client._send(call))

    def get(self, sandbox_id: str) -> dict[str, Any]:
        """One sandbox by its `sbx-` id (a run's, or a long-lived one; kept 7 days)."""
        return dict(self._client._send(_Calls.sandbox(sandbox_id)))

    def list(self) -> builtins.list[dict[str, Any]]:
        """Your live long-lived sandboxes, newest first."""
        return list(self._client._send(_Calls.sandboxes()))

    def kill(self, sandbox_id: str) -> dict[str, Any]:
        """End a long-lived sandbox; returns its record."""
        return dict(self._client._send(_Calls.kill_sandbox(sandbox_id)))


class AsyncSandboxes:
    """`client.sandboxes` of the async client."""

    def __init__(self, client: AsyncSwarmsClient) -> None:
        self._client = client

    async def create(
        self,
        *,
        template: str | None = None,
        size: str | Mapping[str, int] | None = None,
        timeout_seconds: int | None = None,
        env: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Start a long-lived sandbox (see `Sandboxes.create`)."""
        call = _Calls.create_sandbox(template, size, timeout_seconds, env, metadata)
        return dict(await self._client._send(call))

    async def get(self, sandbox_id: str) -> dict[str, Any]:
        """One sandbox by its `sbx-` id (a run's, or a long-lived one; kept 7 days)."""
        return dict(await self._client._send(_Calls.sandbox(sandbox_id)))

    async def list(self) -> builtins.list[dict[str, Any]]:
        """Your live long-lived sandboxes, newest first."""
        return list(await self._client._send(_Calls.sandboxes()))

    async def kill(self, sandbox_id: str) -> dict[str, Any]:
        """End a long-lived sandbox; returns its record."""
        return dict(await self._client._send(_Calls.kill_sandbox(sandbox_id)))
