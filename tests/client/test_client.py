"""The client: retries, idempotency keys, typed errors (stub transport), async on a real server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from inspect_swarm.client import (
    APIConnectionError,
    AsyncSwarmsClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    PlanRequiredError,
    RateLimitError,
    SwarmsAPIError,
    SwarmsClient,
)
from inspect_swarm.client._client import parse_size

from ..servers import KEY, Server, needs_namespaces


def _client(handler: Callable[[httpx.Request], httpx.Response], **kw: object) -> SwarmsClient:
    return SwarmsClient(
        api_key="k", base_url="http://stub", transport=httpx.MockTransport(handler), **kw
    )  # type: ignore[arg-type]


def test_start_retries_with_one_idempotency_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ConnectError("refused")
        if len(seen) == 2:
            return httpx.Response(503, headers={"Retry-After": "0"})
        if len(seen) == 3:
            return httpx.Response(429, json={"detail": "slow down", "code": "rate_limited"})
        return httpx.Response(201, json={"id": "r1", "status": "queued"})

    with _client(handler) as client:
        assert client.swarms.start("true", count=1)["id"] == "r1"
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 4 and len(keys) == 1
    assert all(r.headers["Authorization"] == "Bearer k" for r in seen)


def test_backoff_honours_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("time.sleep", sleeps.append)
    answers = iter(
        [
            httpx.Response(429, headers={"Retry-After": "7"}),
            httpx.Response(503),
            httpx.Response(200, json={"swarms": []}),
        ]
    )
    with _client(lambda _: next(answers)) as client:
        assert client.swarms.list() == []
    assert sleeps == [7.0, 1.0]


def test_gives_up_and_raises_typed_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    calls = 0

    def refuse(_: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("refused")

    with _client(refuse, max_retries=2) as client, pytest.raises(APIConnectionError):
        client.swarms.get("x")
    assert calls == 3
    cases = [
        (401, {"detail": "no key", "code": "unauthorized"}, AuthenticationError),
        (403, {"detail": {"code": "swarm_too_large", "message": "big"}}, AuthenticationError),
        (402, {"error": {"code": "plan_required", "message": "upgrade"}}, PlanRequiredError),
        (404, {"detail": "gone", "code": "not_found"}, NotFoundError),
        (409, {"detail": "busy", "code": "server_busy"}, ConflictError),
        (429, {"detail": "slow"}, RateLimitError),
        (400, {"detail": "bad", "code": "invalid_request"}, SwarmsAPIError),
    ]
    for status, body, error in cases:
        with (
            _client(
                lambda _, s=status, b=body: httpx.Response(s, json=b),  # type: ignore[misc]
                max_retries=0,
            ) as client,
            pytest.raises(error) as caught,
        ):
            client.swarms.get("x")
        assert caught.value.status == status
    assert caught.value.code == "invalid_request" and caught.value.message == "bad"


def test_retry_after_zero_resends_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("time.sleep", sleeps.append)
    answers = iter(
        [httpx.Response(503, headers={"Retry-After": "0"}), httpx.Response(200, json={})]
    )
    with _client(lambda _: next(answers)) as client:
        client.swarms.get("x")
    assert sleeps == [0.0]


def test_a_sandbox_create_is_not_resent_after_a_lost_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    seen: list[httpx.Request] = []

    def lose(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        raise httpx.ReadError("connection reset")

    with _client(lose) as client, pytest.raises(APIConnectionError):
        client.sandboxes.create(size="1x1")
    assert len(seen) == 1
    assert seen[0].read() == b'{"size":{"vcpus":1,"memoryGb":1}}'

    answers = iter([httpx.Response(429), httpx.Response(201, json={"sandboxId": "sbx-1"})])
    with _client(lambda _: next(answers)) as client:  # refused unprocessed: resent
        assert client.sandboxes.create()["sandboxId"] == "sbx-1"


def test_post_without_idempotency_is_not_resent_after_5xx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    calls = 0

    def fail(_: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(500, json={"detail": "boom", "code": "internal_error"})

    with _client(fail) as client, pytest.raises(SwarmsAPIError):
        client.swarms.cancel("x")
    assert calls == 1


def test_tolerant_parsing_and_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with _client(lambda _: httpx.Response(200, json=[{"id": "a"}])) as client:
        assert client.swarms.list() == [{"id": "a"}]
    with _client(lambda _: httpx.Response(200, text='{"index": 0}\n\n{"index": 1}\n')) as client:
        assert client.swarms.results("r") == [{"index": 0}, {"index": 1}]
    monkeypatch.delenv("MARITIME_API_KEY", raising=False)
    with pytest.raises(ValueError, match="MARITIME_API_KEY"):
        SwarmsClient(base_url="http://stub")
    assert parse_size("4x8") == {"vcpus": 4, "memoryGb": 8}
    with pytest.raises(ValueError, match="2x4"):
        parse_size("big")


@pytest.mark.anyio
async def test_the_async_client_retries_by_the_same_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    monkeypatch.setattr("anyio.sleep", sleep)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ConnectError("refused")
        if len(seen) == 2:
            return httpx.Response(503)
        if len(seen) == 3:
            return httpx.Response(429, headers={"Retry-After": "7"})
        if request.method == "POST" and request.url.path == "/api/swarms/r1/cancel":
            return httpx.Response(500, json={"detail": "boom", "code": "internal_error"})
        return httpx.Response(201, json={"id": "r1"})

    async with AsyncSwarmsClient(
        api_key="k", base_url="http://stub", transport=httpx.MockTransport(handler)
    ) as client:
        assert (await client.swarms.start("true", count=1))["id"] == "r1"
        assert sleeps == [0.5, 1.0, 7.0]
        assert len({r.headers["Idempotency-Key"] for r in seen}) == 1
        with pytest.raises(SwarmsAPIError) as caught:
            await client.swarms.cancel("r1")  # a POST is not resent after a 5xx
        assert (caught.value.status, caught.value.code, len(seen)) == (500, "internal_error", 5)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async with AsyncSwarmsClient(
        api_key="k", base_url="http://stub", transport=httpx.MockTransport(refuse), max_retries=2
    ) as client:
        with pytest.raises(APIConnectionError, match="cannot reach http://stub"):
            await client.swarms.get("x")
    assert sleeps[3:] == [0.5, 1.0]


@needs_namespaces
@pytest.mark.anyio
async def test_async_client_against_the_server(server: Server) -> None:
    async with AsyncSwarmsClient(api_key=KEY, base_url=server.url, poll_interval=0.1) as client:
        run = await client.swarms.start("echo async $MARITIME_SWARM_INDEX", count=2, size="1x1")
        done = await client.swarms.wait(run["id"], timeout=60)
        results = await client.swarms.results(run["id"])
        assert [r["stdoutTail"] for r in results] == ["async 0\n", "async 1\n"]
        assert done["counts"]["succeeded"] == 2
        assert any(r["id"] == run["id"] for r in await client.swarms.list())
        with pytest.raises(NotFoundError):
            await client.swarms.get("missing")


@needs_namespaces
@pytest.mark.anyio
async def test_async_sandbox_calls_against_the_server(server: Server) -> None:
    async with AsyncSwarmsClient(api_key=KEY, base_url=server.url) as client:
        made = await client.sandboxes.create(size="1x1", metadata={"async": "yes"})
        assert (await client.sandboxes.get(made["sandboxId"]))["metadata"] == {"async": "yes"}
        assert [s["sandboxId"] for s in await client.sandboxes.list()] == [made["sandboxId"]]
        assert (await client.sandboxes.kill(made["sandboxId"]))["status"] == "ended"
        await client.servers.release()


RUNS = ["abc1" + "0" * 28, "abc2" + "0" * 28, "def3" + "0" * 28]


def _runs_server(request: httpx.Request) -> httpx.Response:
    """A server with three runs, by id only."""
    if request.url.path == "/api/swarms":
        return httpx.Response(200, json={"swarms": [{"id": i} for i in RUNS]})
    run_id = request.url.path.split("/")[3]
    if run_id in RUNS:
        return httpx.Response(200, json={"id": run_id, "status": "completed", "sandboxes": []})
    return httpx.Response(404, json={"detail": f"no swarm run {run_id!r}", "code": "not_found"})


def test_an_id_prefix_is_looked_up_and_an_ambiguous_one_lists_its_matches() -> None:
    with _client(_runs_server) as client:
        assert client.swarms.get("def")["id"] == RUNS[2]
        assert client.swarms.get(RUNS[0])["id"] == RUNS[0]
        with pytest.raises(NotFoundError) as ambiguous:
            client.swarms.cancel("abc")
        assert ambiguous.value.code == "ambiguous_id"
        assert f"'abc' is the start of 2 ids ({RUNS[0]}, {RUNS[1]})" in str(ambiguous.value)
        with pytest.raises(NotFoundError, match="no swarm run 'xyz'"):
            client.swarms.results("xyz")
        with pytest.raises(ValueError, match="the id is empty"):
            client.swarms.get("")


@pytest.mark.anyio
async def test_both_clients_send_the_same_requests_for_every_call() -> None:
    sent: dict[str, list[tuple[str, str, bytes]]] = {"sync": [], "async": []}

    def recorder(which: str) -> Callable[[httpx.Request], httpx.Response]:
        def answer(request: httpx.Request) -> httpx.Response:
            sent[which].append((request.method, request.url.path, request.read()))
            if request.url.path == "/api/swarms" and request.method == "GET":
                return httpx.Response(200, json={"swarms": [{"id": "r1"}]})
            if request.url.path.endswith("/results"):
                return httpx.Response(200, text='{"index": 0}\n')
            if request.url.path == "/v1/sandboxes" and request.method == "GET":
                return httpx.Response(200, json={"sandboxes": []})
            return httpx.Response(200, json={"id": "r1", "status": "completed", "count": 1})

        return answer

    start = {"count": 2, "size": "1x1", "env": {"A": "1"}, "idempotency_key": "k"}
    with _client(recorder("sync")) as client:
        client.swarms.start("true", **start)  # type: ignore[arg-type]
        for call in (client.swarms.get, client.swarms.cancel, client.swarms.results):
            call("r1")
        client.swarms.list(), client.swarms.access(), client.swarms.wait("r1")
        client.servers.list(), client.servers.lease(), client.servers.release()
        client.sandboxes.create(size="1x1", metadata={"m": "1"}), client.sandboxes.list()
        client.sandboxes.get("sbx-1"), client.sandboxes.kill("sbx-1")
    transport = httpx.MockTransport(recorder("async"))
    async with AsyncSwarmsClient(api_key="k", base_url="http://stub", transport=transport) as api:
        await api.swarms.start("true", **start)  # type: ignore[arg-type]
        for acall in (api.swarms.get, api.swarms.cancel, api.swarms.results):
            await acall("r1")
        await api.swarms.list(), await api.swarms.access(), await api.swarms.wait("r1")
        await api.servers.list(), await api.servers.lease(), await api.servers.release()
        await api.sandboxes.create(size="1x1", metadata={"m": "1"}), await api.sandboxes.list()
        await api.sandboxes.get("sbx-1"), await api.sandboxes.kill("sbx-1")
    assert sent["sync"] == sent["async"] and len(sent["sync"]) == 14


def test_every_field_goes_by_its_wire_name_and_an_unknown_one_is_refused() -> None:
    bodies: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.read()))
        return httpx.Response(201, json={"id": "r1"})

    with _client(answer) as client:
        client.swarms.start(
            ["echo", "hi"],
            inputs=[{"args": ["1"]}],
            size={"vcpus": 1, "memoryGb": 1},
            timeout_seconds=60,
            result_path="/out",
            files={"/in": "x"},
            name=None,  # left out
        )
        client.sandboxes.create(template="base", timeout_seconds=30, metadata={"a": "b"})
        with pytest.raises(TypeError, match="'colour' is no option of it; the options are count"):
            client.swarms.start("true", count=1, colour="red")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="'count' is no option of it"):
            client.sandboxes.create(count=1)  # type: ignore[call-arg]
    assert bodies == [
        {
            "command": ["echo", "hi"],
            "inputs": [{"args": ["1"]}],
            "size": {"vcpus": 1, "memoryGb": 1},
            "timeoutSeconds": 60,
            "resultPath": "/out",
            "files": {"/in": "x"},
        },
        {"template": "base", "timeoutSeconds": 30, "metadata": {"a": "b"}},
    ]


def test_where_the_client_finds_its_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from inspect_swarm.client._contexts import Context, record, resolve

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("MARITIME_API_URL", raising=False)
    monkeypatch.delenv("MARITIME_API_KEY", raising=False)
    record(Context("here", "http://127.0.0.1:1", "here-key", "server"), make_current=False)
    record(Context("there", "http://127.0.0.1:2/", "there-key", "login"), make_current=True)

    def chosen(*args: str | None) -> tuple[str, str | None, str]:
        target = resolve(*args)
        return target.url, target.key, target.source

    assert chosen(None, None, None) == ("http://127.0.0.1:2", "there-key", "context 'there'")
    assert chosen(None, None, "here")[:2] == ("http://127.0.0.1:1", "here-key")
    # a key recorded for a URL goes with that URL
    assert chosen("http://127.0.0.1:1", None, None) == (
        "http://127.0.0.1:1",
        "here-key",
        "base_url=",
    )
    monkeypatch.setenv("MARITIME_API_URL", "http://127.0.0.1:3")
    monkeypatch.setenv("MARITIME_API_KEY", "env-key")
    assert chosen(None, None, None) == ("http://127.0.0.1:3", "env-key", "MARITIME_API_URL")
    assert chosen(None, "given", "here")[:2] == ("http://127.0.0.1:1", "given")
    # the environment's key never goes to another server's URL
    assert chosen("http://127.0.0.1:2", None, None)[1] == "there-key"
    with pytest.raises(ValueError, match=r"no API key for http://127.0.0.1:4 \(from base_url=\)"):
        resolve("http://127.0.0.1:4", None, None)
    monkeypatch.delenv("MARITIME_API_KEY")
    with pytest.raises(
        ValueError, match=r"no API key for http://127.0.0.1:3 \(from MARITIME_API_URL"
    ):
        resolve(None, None, None)
    monkeypatch.setenv("MARITIME_API_URL", "http://127.0.0.1:1")
    assert chosen(None, None, None) == ("http://127.0.0.1:1", "here-key", "MARITIME_API_URL")
