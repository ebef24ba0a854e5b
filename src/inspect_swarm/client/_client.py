"""A client for the Swarms API (this package's server or a hosted one), sync and async.

Both clients share everything but sending and sleeping. Each call of the API is described once,
as an operation (`_Operations`): a generator that yields the requests to send (`_Call`) and the
pauses to take (seconds), is sent each answer, and returns the call's result or raises its
typed error. One retry policy (`_Attempts`) serves every request. A client only drives
operations: the blocking one with `httpx.Client` and `time.sleep`, the async one with
`httpx.AsyncClient` and `anyio.sleep`.
"""

from __future__ import annotations

import builtins
import json
import logging
import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar, Unpack
from urllib.parse import quote

import anyio
import httpx

from .._swarms_api import (
    QUOTA_WIRE,
    SANDBOX_FIELDS,
    START_FIELDS,
    ApiField,
    QuotaOptions,
    SandboxOptions,
    StartOptions,
)
from ._contexts import Target, resolve

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 3.0
_MAX_BACKOFF = 8.0
_MAX_RETRY_AFTER = 60.0
_RUNNING = ("queued", "booting", "running")
_F = TypeVar("_F", bound=Callable[..., Any])


class SwarmsAPIError(Exception):
    """An error answer of the Swarms API (or a failure to reach it, with status 0).

    Attributes:
        status: The answer's HTTP status; 0 when the API could not be reached.
        code: The API's error code (`not_found`, `server_busy`...), else `http_<status>`.
        message: The API's explanation, else the HTTP reason phrase.
        request_id: The answer's `X-Request-Id`, to quote to the server's operator, if any.
    """

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
    """404: no such run, sandbox or lease (or an id prefix that matches none, or several)."""


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
    if not isinstance(size, str):
        raise ValueError(f"size: expected VCPUSxGB such as '2x4', got {size!r}")
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


def _start_call(command: str | Sequence[str], options: StartOptions) -> _Call:
    given: dict[str, Any] = dict(options)
    key = given.pop("idempotency_key", None) or str(uuid.uuid4())
    body = _body("start", START_FIELDS, {"command": command, **given})
    return _Call("POST", "/api/swarms", body, {"Idempotency-Key": key})


def _body(call: str, fields: Mapping[str, ApiField], given: Mapping[str, Any]) -> dict[str, Any]:
    """The body of the fields `given` (None leaves one out), by their wire names."""
    unknown = sorted(set(given) - set(fields))
    if unknown:
        known = ", ".join(name for name in fields if name != "command")
        raise TypeError(f"{call}: {unknown[0]!r} is no option of it; the options are {known}")
    return {
        fields[name].wire: _wire_value(fields[name], value)
        for name, value in given.items()
        if value is not None
    }


def _wire_value(field: ApiField, value: Any) -> Any:
    """A value as the API takes it: a size as an object, mappings and lists as JSON's."""
    if field.kind == "size":
        return parse_size(value)
    if field.kind in ("env", "files", "labels"):
        return dict(value)
    if field.kind == "inputs":
        return [dict(item) for item in value]
    if field.kind in ("command", "args") and not isinstance(value, str):
        return list(value)
    return value


def _options_documented(fields: Mapping[str, ApiField]) -> Callable[[_F], _F]:
    """Document each of `fields` in the decorated method's `Args:`, in place of its
    `**options` line, from the fields' own help."""

    def document(method: _F) -> _F:
        lines = (method.__doc__ or "").splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("**options:"):
                indent = line[: len(line) - len(line.lstrip())]
                end = i + 1  # past the entry's continuation lines, indented deeper
                while end < len(lines) and lines[end].startswith(indent + " "):
                    end += 1
                lines[i:end] = [
                    f"{indent}{name}: {field.help}"
                    + (
                        ""
                        if field.default is None
                        else f" The server's default: {field.default!r}."
                    )
                    for name, field in fields.items()
                    if name != "command"
                ]
                break
        method.__doc__ = "\n".join(lines)
        return method

    return document


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
    """Whether a run has ended (every sandbox done).

    Args:
        run: The run, as `client.swarms.get()` returns it.

    Returns:
        True once every sandbox is done or the run's status is no longer queued, booting or
        running.
    """
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


_T = TypeVar("_T")
_Answer = httpx.Response | httpx.TransportError | None
Op = Generator[_Call | float, _Answer, _T]
"""An operation: yields requests to send and seconds to pause, is sent each request's answer
(None after a pause), and returns its result."""


class _Settings:
    def __init__(self, target: Target, max_retries: int, poll_interval: float) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries: must be 0 or more, got {max_retries}")
        self.target = target
        self.max_retries = max_retries
        self.poll_interval = poll_interval

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.target.key}", "User-Agent": "inspect-swarm"}


class _Attempts:
    """One call's attempts: when to resend it, and what its final answer means."""

    def __init__(self, call: _Call, settings: _Settings) -> None:
        self.call = call
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
            message = f"cannot reach {self._settings.target.url}: {answer}"
            raise APIConnectionError(0, "connection_error", message) from answer
        if answer.is_success:
            return self.call.parse(answer)
        raise _error_for(answer)


def _path(template: str, given_id: str) -> str:
    if not given_id:
        raise ValueError(f"{template}: the id is empty; give a run or sandbox id (or a prefix)")
    return template.format(quote(given_id, safe=""))


class _Operations:
    """Every call of the API as an operation, described once for both clients."""

    def __init__(self, settings: _Settings) -> None:
        self._settings = settings

    def send(self, call: _Call) -> Op[Any]:
        """Send `call`, resending it as `_Attempts` decides; its result."""
        attempts = _Attempts(call, self._settings)
        while True:
            answer = yield call
            assert answer is not None
            delay = attempts.retry_delay(answer)
            if delay is None:
                return attempts.result(answer)
            yield delay

    def _by_id(
        self, make: Callable[[str], _Call], given: str, ids: Callable[[], Op[list[str]]]
    ) -> Op[Any]:
        """Send the call `make` builds for the id `given`, or, if there is no such id, for the
        one id among `ids()` that starts with it."""
        try:
            return (yield from self.send(make(given)))
        except NotFoundError as missing:
            matches = [i for i in (yield from ids()) if i.startswith(given)]
            if len(matches) == 1:
                return (yield from self.send(make(matches[0])))
            if not matches:
                raise
            shown = ", ".join(matches[:10]) + (", ..." if len(matches) > 10 else "")
            raise NotFoundError(
                404,
                "ambiguous_id",
                f"{given!r} is the start of {len(matches)} ids ({shown}); give more of it",
            ) from missing

    def start(self, call: _Call) -> Op[dict[str, Any]]:
        return dict((yield from self.send(call)))

    def run(self, run_id: str) -> Op[dict[str, Any]]:
        make = lambda i: _Call("GET", _path("/api/swarms/{}", i))  # noqa: E731
        return dict((yield from self._by_id(make, run_id, self._run_ids)))

    def runs(self) -> Op[list[dict[str, Any]]]:
        return list((yield from self.send(_Call("GET", "/api/swarms", parse=_items("swarms")))))

    def _run_ids(self) -> Op[list[str]]:
        return [run["id"] for run in (yield from self.runs())]

    def cancel(self, run_id: str) -> Op[dict[str, Any]]:
        make = lambda i: _Call("POST", _path("/api/swarms/{}/cancel", i))  # noqa: E731
        return dict((yield from self._by_id(make, run_id, self._run_ids)))

    def results(self, run_id: str) -> Op[list[dict[str, Any]]]:
        make = lambda i: _Call("GET", _path("/api/swarms/{}/results", i), parse=_jsonl)  # noqa: E731
        return list((yield from self._by_id(make, run_id, self._run_ids)))

    def access(self) -> Op[dict[str, Any]]:
        return dict((yield from self.send(_Call("GET", "/api/swarms/access"))))

    def wait(
        self,
        run_id: str,
        poll_interval: float | None,
        timeout: float | None,
        on_update: Callable[[dict[str, Any]], None] | None,
    ) -> Op[dict[str, Any]]:
        interval = poll_interval or self._settings.poll_interval
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = yield from self.run(run_id)
            run_id = run.get("id", run_id)  # a prefix is looked up once
            if on_update is not None:
                on_update(run)
            if is_finished(run):
                return run
            if deadline is not None and time.monotonic() + interval > deadline:
                raise TimeoutError(f"swarm run {run_id} still running after {timeout}s")
            yield interval

    def servers(self) -> Op[dict[str, Any]]:
        return dict((yield from self.send(_Call("GET", "/v1/servers"))))

    def lease(self) -> Op[dict[str, Any]]:
        return dict((yield from self.send(_Call("POST", "/v1/servers/lease"))))

    def release(self) -> Op[dict[str, Any]]:
        return dict((yield from self.send(_Call("DELETE", "/v1/servers/lease"))))

    def create_sandbox(self, options: SandboxOptions) -> Op[dict[str, Any]]:
        body = _body("create", SANDBOX_FIELDS, options)
        call = _Call("POST", "/v1/sandboxes", body, safe_to_retry=False)
        return dict((yield from self.send(call)))

    def sandbox(self, sandbox_id: str) -> Op[dict[str, Any]]:
        make = lambda i: _Call("GET", _path("/v1/sandboxes/{}", i))  # noqa: E731
        return dict((yield from self._by_id(make, sandbox_id, self._sandbox_ids)))

    def sandboxes(self) -> Op[list[dict[str, Any]]]:
        call = _Call("GET", "/v1/sandboxes", parse=_items("sandboxes"))
        return list((yield from self.send(call)))

    def _sandbox_ids(self) -> Op[list[str]]:
        """Every sandbox id within reach: the live long-lived ones, and those of every run."""
        ids = [box["sandboxId"] for box in (yield from self.sandboxes())]
        for run_id in (yield from self._run_ids()):
            run = yield from self.send(_Call("GET", _path("/api/swarms/{}", run_id)))
            ids += [sandbox["sandboxId"] for sandbox in run.get("sandboxes", [])]
        return ids

    def kill_sandbox(self, sandbox_id: str) -> Op[dict[str, Any]]:
        make = lambda i: _Call("DELETE", _path("/v1/sandboxes/{}", i))  # noqa: E731
        return dict((yield from self._by_id(make, sandbox_id, self._sandbox_ids)))

    def add_account(
        self, name: str, scopes: Sequence[str] | None, quotas: QuotaOptions
    ) -> Op[dict[str, Any]]:
        body: dict[str, Any] = {"name": name, "quotas": _quotas_body(quotas, keep_none=False)}
        if scopes is not None:
            body["scopes"] = list(scopes)
        call = _Call("POST", ACCOUNTS_PATH, body, safe_to_retry=False)
        return dict((yield from self.send(call)))

    def accounts(self) -> Op[list[dict[str, Any]]]:
        call = _Call("GET", ACCOUNTS_PATH, parse=_items("accounts"))
        return list((yield from self.send(call)))

    def rotate_account(self, name: str) -> Op[dict[str, Any]]:
        path = _path(f"{ACCOUNTS_PATH}/{{}}/rotate", name)
        return dict((yield from self.send(_Call("POST", path, safe_to_retry=False))))

    def set_account_quotas(self, name: str, quotas: QuotaOptions) -> Op[dict[str, Any]]:
        body = _quotas_body(quotas, keep_none=True)
        call = _Call("PATCH", _path(f"{ACCOUNTS_PATH}/{{}}", name), body)
        return dict((yield from self.send(call)))

    def remove_account(self, name: str) -> Op[dict[str, Any]]:
        return dict((yield from self.send(_Call("DELETE", _path(f"{ACCOUNTS_PATH}/{{}}", name)))))


ACCOUNTS_PATH = "/admin/accounts"


def _quotas_body(quotas: QuotaOptions, keep_none: bool) -> dict[str, int | None]:
    """Quotas by their wire names (None, the server's default again, kept if `keep_none`)."""
    unknown = sorted(set(quotas) - set(QUOTA_WIRE))
    if unknown:
        raise TypeError(
            f"accounts: {unknown[0]!r} is no quota; the quotas are {', '.join(QUOTA_WIRE)}"
        )
    given: dict[str, int | None] = dict(quotas)  # type: ignore[arg-type]
    return {
        QUOTA_WIRE[name]: value for name, value in given.items() if keep_none or value is not None
    }


def _request(http: httpx.Client | httpx.AsyncClient, call: _Call) -> httpx.Request:
    return http.build_request(call.method, call.path, json=call.body, headers=call.headers)


class SwarmsClient:
    """A blocking client for the Swarms API.

    The server is the one given (`base_url` and `api_key`, or a recorded `context`), else
    `MARITIME_API_URL` and `MARITIME_API_KEY`, else the current context: the server
    `inspect-swarm server` started on this machine, or the last one `inspect-swarm login`
    recorded. A ValueError says how to choose one when none is. Every call that takes a run
    or sandbox id also takes a unique prefix of one.

    A call that the API answers with an error raises the `SwarmsAPIError` subclass of its
    status (`NotFoundError`, `ConflictError`...), and one that cannot reach the API raises
    `APIConnectionError`, once its retries are spent.

    Args:
        api_key: The API key (default: `MARITIME_API_KEY`, else the context's).
        base_url: The API's address (default: `MARITIME_API_URL`, else the current context's).
        context: A context recorded by `inspect-swarm server` or `login`, by name.
        timeout: Seconds to wait for each HTTP request.
        max_retries: How many times to resend after a connection error, 429 or 503.
        poll_interval: Seconds between polls in `swarms.wait` (default 3).
        transport: An httpx transport to use instead of the network (for tests).

    Attributes:
        swarms: Runs of one command on many sandboxes (`Swarms`).
        servers: The swarm servers and your lease (`Servers`).
        sandboxes: Long-lived sandboxes, and any sandbox's record (`Sandboxes`).
        accounts: The server's accounts, with a key of the `admin` scope (`Accounts`).

    Raises:
        ValueError: No server is given and none can be found.
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        context: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        target = resolve(base_url, api_key, context)
        self._settings = _Settings(target, max_retries, poll_interval)
        self._operations = _Operations(self._settings)
        self._http = httpx.Client(
            base_url=target.url,
            timeout=timeout,
            headers=self._settings.headers(),
            transport=transport,
        )
        self.swarms = Swarms(self)
        self.servers = Servers(self)
        self.sandboxes = Sandboxes(self)
        self.accounts = Accounts(self)

    @property
    def base_url(self) -> str:
        """The address of the API this client talks to."""
        return self._settings.target.url

    def __enter__(self) -> SwarmsClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def _drive(self, operation: Op[_T]) -> _T:
        answer: _Answer = None
        while True:
            try:
                step = operation.send(answer)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, _Call):
                try:
                    answer = self._http.send(_request(self._http, step))
                except httpx.TransportError as ex:
                    answer = ex
            else:
                time.sleep(step)
                answer = None


class AsyncSwarmsClient:
    """The Swarms API client for async code (asyncio or trio), on httpx.

    Takes the same arguments as `SwarmsClient` (and finds its server the same way), with an
    async httpx transport, and raises the same errors.

    Args:
        api_key: As for `SwarmsClient`.
        base_url: As for `SwarmsClient`.
        context: As for `SwarmsClient`.
        timeout: As for `SwarmsClient`.
        max_retries: As for `SwarmsClient`.
        poll_interval: As for `SwarmsClient`.
        transport: An async httpx transport to use instead of the network (for tests).

    Attributes:
        swarms: The calls of `SwarmsClient.swarms`, awaited.
        servers: The calls of `SwarmsClient.servers`, awaited.
        sandboxes: The calls of `SwarmsClient.sandboxes`, awaited.
        accounts: The calls of `SwarmsClient.accounts`, awaited.
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        context: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        target = resolve(base_url, api_key, context)
        self._settings = _Settings(target, max_retries, poll_interval)
        self._operations = _Operations(self._settings)
        self._http = httpx.AsyncClient(
            base_url=target.url,
            timeout=timeout,
            headers=self._settings.headers(),
            transport=transport,
        )
        self.swarms = AsyncSwarms(self)
        self.servers = AsyncServers(self)
        self.sandboxes = AsyncSandboxes(self)
        self.accounts = AsyncAccounts(self)

    @property
    def base_url(self) -> str:
        """The address of the API this client talks to."""
        return self._settings.target.url

    async def __aenter__(self) -> AsyncSwarmsClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def _drive(self, operation: Op[_T]) -> _T:
        answer: _Answer = None
        while True:
            try:
                step = operation.send(answer)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, _Call):
                try:
                    answer = await self._http.send(_request(self._http, step))
                except httpx.TransportError as ex:
                    answer = ex
            else:
                await anyio.sleep(step)
                answer = None


class Swarms:
    """`client.swarms`: start, follow, cancel and collect swarm runs.

    Args:
        client: The client whose calls these are (it makes this object).
    """

    def __init__(self, client: SwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    @_options_documented(START_FIELDS)
    def start(
        self, command: str | Sequence[str], **options: Unpack[StartOptions]
    ) -> dict[str, Any]:
        """Start a run of `command` on `count` sandboxes (or one per input).

        Sends an Idempotency-Key (`idempotency_key`, else a new one kept across this call's
        own retries), so a retried start returns the same run.

        Args:
            command: A shell command, or a list of arguments.
            **options: The run's other fields, by their Python names (`StartOptions` lists
                them: `count` or `inputs`, `size`, `timeout_seconds`, `result_path`...).

        Returns:
            The run, as the API's dict.

        Raises:
            TypeError: An option that is no field of a start.
        """
        return self._drive(self._operations.start(_start_call(command, options)))

    def get(self, run_id: str) -> dict[str, Any]:
        """The run with every sandbox.

        Args:
            run_id: The run's id, or a prefix that only it has.

        Returns:
            The run, as the API's dict.
        """
        return self._drive(self._operations.run(run_id))

    def list(self) -> list[dict[str, Any]]:
        """Your runs, newest first."""
        return self._drive(self._operations.runs())

    def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a run: queued sandboxes never start, running ones stop.

        Args:
            run_id: The run's id, or a prefix that only it has.

        Returns:
            The run, as the API's dict.
        """
        return self._drive(self._operations.cancel(run_id))

    def results(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """One dict per sandbox, in input order.

        Args:
            run_id: The run's id, or a prefix that only it has.

        Returns:
            The sandboxes' results.
        """
        return self._drive(self._operations.results(run_id))

    def access(self) -> dict[str, Any]:
        """Whether the account has Swarms."""
        return self._drive(self._operations.access())

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

        Returns:
            The ended run, as the API's dict.

        Raises:
            TimeoutError: The run was still going after `timeout` seconds.
        """
        return self._drive(self._operations.wait(run_id, poll_interval, timeout, on_update))


class AsyncSwarms:
    """`client.swarms` of the async client (the same calls, awaited)."""

    def __init__(self, client: AsyncSwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    async def start(
        self, command: str | Sequence[str], **options: Unpack[StartOptions]
    ) -> dict[str, Any]:
        """Start a run (see `Swarms.start`)."""
        return await self._drive(self._operations.start(_start_call(command, options)))

    async def get(self, run_id: str) -> dict[str, Any]:
        """The run with every sandbox."""
        return await self._drive(self._operations.run(run_id))

    async def list(self) -> list[dict[str, Any]]:
        """Your runs, newest first."""
        return await self._drive(self._operations.runs())

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a run."""
        return await self._drive(self._operations.cancel(run_id))

    async def results(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """One dict per sandbox, in input order."""
        return await self._drive(self._operations.results(run_id))

    async def access(self) -> dict[str, Any]:
        """Whether the account has Swarms."""
        return await self._drive(self._operations.access())

    async def wait(
        self,
        run_id: str,
        *,
        poll_interval: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the same call as the sync client's)
        on_update: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll the run until it ends and return it (see `Swarms.wait`)."""
        operation = self._operations.wait(run_id, poll_interval, timeout, on_update)
        return await self._drive(operation)


class Servers:
    """`client.servers`: the swarm servers and your lease.

    Args:
        client: The client whose calls these are (it makes this object).
    """

    def __init__(self, client: SwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    def list(self) -> dict[str, Any]:
        """Every server and its state, your open lease, and whether you may rent one."""
        return self._drive(self._operations.servers())

    def lease(self) -> dict[str, Any]:
        """Rent a free server, or return the one you rent."""
        return self._drive(self._operations.lease())

    def release(self) -> dict[str, Any]:
        """Release your server: every sandbox on it ends."""
        return self._drive(self._operations.release())


class AsyncServers:
    """`client.servers` of the async client."""

    def __init__(self, client: AsyncSwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    async def list(self) -> dict[str, Any]:
        """Every server and its state, your open lease, and whether you may rent one."""
        return await self._drive(self._operations.servers())

    async def lease(self) -> dict[str, Any]:
        """Rent a free server, or return the one you rent."""
        return await self._drive(self._operations.lease())

    async def release(self) -> dict[str, Any]:
        """Release your server: every sandbox on it ends."""
        return await self._drive(self._operations.release())


class Sandboxes:
    """`client.sandboxes`: long-lived sandboxes on your server, and any sandbox's record.

    Args:
        client: The client whose calls these are (it makes this object).
    """

    def __init__(self, client: SwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    @_options_documented(SANDBOX_FIELDS)
    def create(self, **options: Unpack[SandboxOptions]) -> dict[str, Any]:
        """Start a sandbox on your server that lives until killed, timed out or released.

        It is used through the E2B API (its `sandboxId`, `envdUrl` and `envdAccessToken`).
        A lost connection is not retried: the sandbox may have started.

        Args:
            **options: Its fields, by their Python names (`SandboxOptions` lists them:
                `template`, `size`, `timeout_seconds`, `env`, `metadata`...).

        Returns:
            The sandbox, as the API's dict.

        Raises:
            TypeError: An option that is no field of a sandbox.
        """
        return self._drive(self._operations.create_sandbox(options))

    def get(self, sandbox_id: str) -> dict[str, Any]:
        """One sandbox by its `sbx-` id (a run's, or a long-lived one; kept 7 days).

        Args:
            sandbox_id: The sandbox's id, or a prefix that only it has.

        Returns:
            The sandbox, as the API's dict.
        """
        return self._drive(self._operations.sandbox(sandbox_id))

    def list(self) -> builtins.list[dict[str, Any]]:
        """Your live long-lived sandboxes, newest first."""
        return self._drive(self._operations.sandboxes())

    def kill(self, sandbox_id: str) -> dict[str, Any]:
        """End a long-lived sandbox.

        Args:
            sandbox_id: The sandbox's id, or a prefix that only it has.

        Returns:
            The sandbox's record.
        """
        return self._drive(self._operations.kill_sandbox(sandbox_id))


class AsyncSandboxes:
    """`client.sandboxes` of the async client."""

    def __init__(self, client: AsyncSwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    async def create(self, **options: Unpack[SandboxOptions]) -> dict[str, Any]:
        """Start a long-lived sandbox (see `Sandboxes.create`)."""
        return await self._drive(self._operations.create_sandbox(options))

    async def get(self, sandbox_id: str) -> dict[str, Any]:
        """One sandbox by its `sbx-` id (a run's, or a long-lived one; kept 7 days)."""
        return await self._drive(self._operations.sandbox(sandbox_id))

    async def list(self) -> builtins.list[dict[str, Any]]:
        """Your live long-lived sandboxes, newest first."""
        return await self._drive(self._operations.sandboxes())

    async def kill(self, sandbox_id: str) -> dict[str, Any]:
        """End a long-lived sandbox; returns its record."""
        return await self._drive(self._operations.kill_sandbox(sandbox_id))


class Accounts:
    """`client.accounts`: add, list, rotate, set quotas of and remove a server's accounts,
    while it runs, with a key of the `admin` scope.

    Args:
        client: The client whose calls these are (it makes this object).
    """

    def __init__(self, client: SwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    def add(
        self, name: str, *, scopes: Sequence[str] | None = None, **quotas: Unpack[QuotaOptions]
    ) -> dict[str, Any]:
        """Add an account. A lost connection is not retried: it may have been added.

        Args:
            name: Its name (1 to 63 of a-z, 0-9, `.`, `_` and `-`).
            scopes: What its key may do: `read`, `provision` or both (default both).
            **quotas: Its own quotas in place of the server's defaults (`max_queued`,
                `runs_per_minute`, `max_running`, `max_memory_gb`).

        Returns:
            The account, its key in `apiKey` (shown this once).

        Raises:
            TypeError: A quota the server does not have.
        """
        return self._drive(self._operations.add_account(name, scopes, quotas))

    def list(self) -> builtins.list[dict[str, Any]]:
        """The accounts added while the server runs, oldest first, with their quotas."""
        return self._drive(self._operations.accounts())

    def rotate(self, name: str) -> dict[str, Any]:
        """Give an account a new key; the old one, and its lease's, are refused from now on.

        Args:
            name: The account's name.

        Returns:
            The account, its new key in `apiKey`.
        """
        return self._drive(self._operations.rotate_account(name))

    def set_quotas(self, name: str, **quotas: Unpack[QuotaOptions]) -> dict[str, Any]:
        """Set an account's own quotas; those not given stay as they are.

        Args:
            name: The account's name.
            **quotas: Its quotas by name (`max_queued`, `runs_per_minute`, `max_running`,
                `max_memory_gb`); None gives one the server's default again.

        Returns:
            The account.
        """
        return self._drive(self._operations.set_account_quotas(name, quotas))

    def remove(self, name: str) -> dict[str, Any]:
        """Remove an account: its keys stop working, its runs and sandboxes end.

        Args:
            name: The account's name.

        Returns:
            The account as it was.
        """
        return self._drive(self._operations.remove_account(name))


class AsyncAccounts:
    """`client.accounts` of the async client."""

    def __init__(self, client: AsyncSwarmsClient) -> None:
        self._drive = client._drive
        self._operations = client._operations

    async def add(
        self, name: str, *, scopes: Sequence[str] | None = None, **quotas: Unpack[QuotaOptions]
    ) -> dict[str, Any]:
        """Add an account (see `Accounts.add`); its key is in `apiKey`."""
        return await self._drive(self._operations.add_account(name, scopes, quotas))

    async def list(self) -> builtins.list[dict[str, Any]]:
        """The accounts added while the server runs, oldest first, with their quotas."""
        return await self._drive(self._operations.accounts())

    async def rotate(self, name: str) -> dict[str, Any]:
        """Give an account a new key (in `apiKey`); the old one is refused from now on."""
        return await self._drive(self._operations.rotate_account(name))

    async def set_quotas(self, name: str, **quotas: Unpack[QuotaOptions]) -> dict[str, Any]:
        """Set an account's own quotas (None: the server's default again)."""
        return await self._drive(self._operations.set_account_quotas(name, quotas))

    async def remove(self, name: str) -> dict[str, Any]:
        """Remove an account: its keys stop working, its runs and sandboxes end."""
        return await self._drive(self._operations.remove_account(name))
