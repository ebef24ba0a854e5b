"""A fuzz of every endpoint with generated bad input: never an internal error, and the server
whole after (healthy, a run still completing, no error in its log).

Hypothesis draws each request: valid bodies with one field replaced by any JSON value, any
JSON value, bytes that are not JSON or nest too deeply, odd ids, queries and headers. The
examples are derived from the test's code (`derandomize`), so every run sends the same ones.
"""

from __future__ import annotations

import base64
import json
import signal
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..server.engines.test_sandboxes import TINY
from ..servers import KEY, OTHER_KEY, READ_ONLY_KEY, Server, start_server, wait_for

FUZZ = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
DELIBERATE = {501, 502, 507}
"""Server-side statuses the server answers on purpose: no terminals here, a sandbox that
ended, a sandbox's disk full."""

NASTY = [
    "",
    " ",
    "\0",
    "a\0b",
    "/tmp/a\0b",
    "\x1b[2J",
    "\n",
    "A=B",
    "1A",
    "../../etc/passwd",
    "/proc/self/environ",
    "/dev/zero",
    "x" * 300,
    "/" + "y" * 5000,
    "\ud800",
    "\U0001f642",
    "%00",
    "-1",
    "0",
    "NaN",
    "null",
    "base",
    "root",
]
texts = st.text(max_size=12) | st.sampled_from(NASTY)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | texts
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
RAW = [
    b"",
    b"{",
    b"[" * 5000,
    b'{"a":' * 100 + b"1" + b"}" * 100,
    b"\xff\xfe\x00",
    b'{"count": 1' + b"0" * 5000 + b"}",
    b'{"command": "\\ud800", "count": 1}',
    b"NaN",
]
raw_bodies = st.binary(max_size=32) | st.sampled_from(RAW)
header_texts = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20).map(
    str.strip
)
keys = st.sampled_from([KEY, KEY, KEY, OTHER_KEY, READ_ONLY_KEY, "mlk_nothing", ""])


def mutated(valid: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """`valid` with one field, at any depth, replaced by any value, dropped, or added."""
    fields = st.sampled_from([*sorted(valid), "extra"])
    replaced = st.tuples(fields, values).map(lambda kv: {**valid, kv[0]: kv[1]})
    dropped = fields.map(lambda k: {f: v for f, v in valid.items() if f != k})
    options = [replaced, dropped]
    for key, inner in valid.items():
        if isinstance(inner, list) and inner and isinstance(inner[0], dict):
            inner, wrap = inner[0], lambda m, key=key: {**valid, key: [m]}
        else:
            wrap = lambda m, key=key: {**valid, key: m}  # noqa: E731
        if isinstance(inner, dict) and inner:
            options.append(mutated(inner).map(wrap))
    return st.one_of(options)


def json_bodies(valid: dict[str, Any]) -> st.SearchStrategy[bytes]:
    encoded = (mutated(valid) | values).map(lambda v: json.dumps(v).encode())
    return encoded | raw_bodies


def segment(text: str) -> str:
    return quote(text.encode(errors="surrogatepass"), safe="") or "x"


def check(response: httpx.Response) -> None:
    """No internal error, in HTTP or in a Connect stream's end."""
    what = f"{response.request.method} {response.request.url}: {response.status_code}"
    assert response.status_code < 500 or response.status_code in DELIBERATE, (
        f"{what} {response.text[:300]}"
    )
    if response.headers.get("content-type", "").startswith("application/connect+json"):
        end = envelopes(response.content)[-1]
        assert end.get("error", {}).get("code") not in ("internal", "unknown"), f"{what} {end}"
    elif response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
        code = body.get("code") if isinstance(body, dict) else None
        assert code not in ("internal", "unknown", "internal_error"), f"{what} {body}"


def envelopes(data: bytes) -> list[dict[str, Any]]:
    found = []
    while len(data) >= 5:
        size = int.from_bytes(data[1:5], "big")
        found.append(json.loads(data[5 : 5 + size] or b"{}"))
        data = data[5 + size :]
    return found


def envelope(message: Any) -> bytes:
    data = json.dumps(message).encode()
    return b"\0" + len(data).to_bytes(4, "big") + data


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A small server: starts past 3 sandboxes are refused, 4 GiB to book."""
    handle = start_server(
        tmp_path_factory.mktemp("fuzz") / "state",
        "--memory-gib",
        "4",
        "--max-sandboxes",
        "3",
        "--read-timeout",
        "5",
    )
    yield handle
    handle.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture
def box(http: httpx.Client) -> Iterator[dict[str, str]]:
    """A live E2B sandbox: the headers its daemon's requests need."""
    http.delete("/v1/servers/lease", headers=auth(KEY))  # ends what earlier fuzzing started
    for _ in range(100):  # while what the lease held ends
        created = http.post("/v2/sandboxes", json={"timeout": 120}, headers={"X-API-KEY": KEY})
        if created.status_code != 429:
            break
        time.sleep(0.1)
    assert created.status_code == 201, created.text
    sandbox = created.json()
    yield {"E2b-Sandbox-Id": sandbox["sandboxID"], "X-Access-Token": sandbox["envdAccessToken"]}
    http.delete(f"/sandboxes/{sandbox['sandboxID']}", headers={"X-API-KEY": KEY})


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "X-API-KEY": key} if key else {}


SIZE = {"vcpus": 1, "memoryGb": 1}
STARTS = [
    {"command": "true", "count": 1, "size": SIZE, "timeoutSeconds": 5},
    {
        "command": "cat /tmp/x",
        "count": 1,
        "size": SIZE,
        "timeoutSeconds": 5,
        "env": {"A": "1"},
        "files": {"/tmp/x": "y"},
        "resultPath": "/tmp/x",
        "name": "n",
    },
    {
        "command": ["true"],
        "inputs": [{"args": ["a"], "env": {"B": "2"}, "files": {"/tmp/y": "z"}}],
        "size": SIZE,
        "timeoutSeconds": 5,
        "concurrency": 1,
    },
]
SANDBOX = {"size": SIZE, "timeoutSeconds": 5, "env": {"A": "1"}, "metadata": {"k": "v"}}
E2B_CREATE = {"templateID": "base", "timeout": 5, "metadata": {"k": "v"}, "envVars": {"A": "1"}}


@FUZZ
@given(
    call=st.one_of(
        *(st.tuples(st.just("/api/swarms"), json_bodies(start)) for start in STARTS),
        st.tuples(st.just("/v1/sandboxes"), json_bodies(SANDBOX)),
    ),
    key=keys,
    idempotency=st.none() | header_texts,
)
def test_starts(
    http: httpx.Client, call: tuple[str, bytes], key: str, idempotency: str | None
) -> None:
    path, body = call
    headers = auth(key) | ({"Idempotency-Key": idempotency} if idempotency else {})
    check(http.post(path, content=body, headers=headers))


@FUZZ
@given(
    method_path=st.sampled_from(
        [
            ("GET", "/api/swarms/{}"),
            ("GET", "/api/swarms/{}/results"),
            ("POST", "/api/swarms/{}/cancel"),
            ("GET", "/v1/sandboxes/{}"),
            ("DELETE", "/v1/sandboxes/{}"),
            ("GET", "/api/swarms"),
            ("GET", "/api/swarms/access"),
            ("GET", "/v1/servers"),
            ("GET", "/v1/sandboxes"),
            ("POST", "/v1/servers/lease"),
            ("GET", "/healthz"),
            ("GET", "/{}"),
            ("GET", "/sandboxes/{}"),
            ("DELETE", "/sandboxes/{}"),
            ("POST", "/sandboxes/{}/timeout"),
            ("POST", "/sandboxes/{}/connect"),
            ("POST", "/v2/sandboxes/{}/connect"),
            ("GET", "/sandboxes"),
            ("GET", "/v2/sandboxes"),
        ]
    ),
    ident=texts,
    query=st.dictionaries(header_texts, header_texts, max_size=2)
    | st.fixed_dictionaries(
        {},
        optional={name: header_texts for name in ("limit", "nextToken", "metadata", "state")},
    ),
    key=keys,
    body=json_bodies({"timeout": 30}),
)
def test_ids_queries_and_bodies(
    http: httpx.Client,
    method_path: tuple[str, str],
    ident: str,
    query: dict[str, str],
    key: str,
    body: bytes,
) -> None:
    method, path = method_path
    url = path.format(segment(ident))
    check(http.request(method, url, params=query, headers=auth(key), content=body))


@FUZZ
@given(key=st.sampled_from([OTHER_KEY, READ_ONLY_KEY, "mlk_nothing", ""]))
def test_releasing_a_lease_one_does_not_hold(http: httpx.Client, key: str) -> None:
    check(http.delete("/v1/servers/lease", headers=auth(key)))


@FUZZ
@given(
    body=json_bodies(E2B_CREATE),
    path=st.sampled_from(["/sandboxes", "/v2/sandboxes"]),
    key=keys,
)
def test_e2b_creates(http: httpx.Client, path: str, body: bytes, key: str) -> None:
    check(http.post(path, content=body, headers=auth(key)))


def test_e2b_timeout_and_connect_of_a_live_sandbox(http: httpx.Client, box: dict[str, str]) -> None:
    ident = box["E2b-Sandbox-Id"]

    @FUZZ
    @given(path=st.sampled_from(["timeout", "connect"]), body=json_bodies({"timeout": 60}))
    def fuzz(path: str, body: bytes) -> None:
        check(http.post(f"/sandboxes/{ident}/{path}", content=body, headers=auth(KEY)))
        # keep it alive for the next example
        http.post(f"/sandboxes/{ident}/timeout", json={"timeout": 60}, headers=auth(KEY))

    fuzz()


FS = {
    "Stat": {"path": "/tmp"},
    "ListDir": {"path": "/tmp", "depth": 2},
    "MakeDir": {"path": "/tmp/f/d"},
    "Move": {"source": "/tmp/f/a", "destination": "/tmp/f/b"},
    "Remove": {"path": "/tmp/f/a"},
}
PROCESS = {
    "List": {},
    "SendInput": {"process": {"pid": 1}, "input": {"stdin": "aGk="}},
    "CloseStdin": {"process": {"tag": "t"}},
    "SendSignal": {"process": {"pid": 1}, "signal": "SIGNAL_SIGTERM"},
    "Update": {"process": {"pid": 1}},
}


def unary(method: str) -> st.SearchStrategy[tuple[str, bytes]]:
    service, name = method.split("/")
    valid = (FS if service == "filesystem.Filesystem" else PROCESS)[name]
    return st.tuples(st.just(method), json_bodies(valid))


@FUZZ
@given(
    call=st.one_of(
        *(unary(f"filesystem.Filesystem/{name}") for name in FS),
        *(unary(f"process.Process/{name}") for name in PROCESS),
    ),
    content_type=st.sampled_from(["application/json", "application/json", "application/proto"]),
    token=st.sampled_from([None, None, None, "wrong"]),
    user=st.sampled_from([None, "user", "nobody", "no-such-user"]),
)
def test_envd_unary_calls(
    http: httpx.Client,
    box: dict[str, str],
    call: tuple[str, bytes],
    content_type: str,
    token: str | None,
    user: str | None,
) -> None:
    method, body = call
    if method.endswith(("/Remove", "/Move")):
        body = body.replace(b'"/', b'"/tmp/f/')  # what a fuzz removes stays in /tmp/f
    headers = {**box, "Content-Type": content_type}
    if token is not None:
        headers["X-Access-Token"] = token
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
    check(http.post(f"/{method}", content=body, headers=headers))


START_PROCESS = {"cmd": "/bin/echo", "args": ["a"], "envs": {"A": "1"}, "cwd": "/tmp"}


@FUZZ
@given(
    process=mutated(START_PROCESS) | values,
    stream=st.sampled_from(["Start", "Connect", "StreamInput"]),
    extra=mutated({"stdin": False, "tag": "t"}),
    raw=st.none() | raw_bodies,
)
def test_envd_streams(
    http: httpx.Client,
    box: dict[str, str],
    process: Any,
    stream: str,
    extra: dict[str, Any],
    raw: bytes | None,
) -> None:
    if stream == "Start":
        message: Any = {"process": process, **extra}
        content = envelope(message)
    elif stream == "Connect":
        content = envelope({"process": process})
    else:
        content = envelope({"start": {"process": process}}) + envelope(
            {"data": {"input": {"stdin": "aGk="}}}
        )
    headers = {**box, "Content-Type": "application/connect+json", "Connect-Timeout-Ms": "3000"}
    check(http.post(f"/process.Process/{stream}", content=raw or content, headers=headers))


@FUZZ
@given(
    path=texts,
    user=st.none() | texts.filter(lambda t: t != "root"),
    data=st.binary(max_size=64),
    multipart=st.booleans(),
    filename=texts,
)
def test_envd_files(
    http: httpx.Client,
    box: dict[str, str],
    path: str,
    user: str | None,
    data: bytes,
    multipart: bool,
    filename: str,
) -> None:
    params = {"path": path} | ({"username": user} if user is not None else {})
    params = {k: v for k, v in params.items() if "\ud800" not in v}
    check(http.get("/files", params=params, headers=box))
    check(http.get("/health", headers=box))
    if multipart:
        files = {"file": (filename.replace("\ud800", ""), data)}
        check(http.post("/files", params=params, files=files, headers=box))
    else:
        headers = {**box, "Content-Type": "application/octet-stream"}
        check(http.post("/files", params=params, content=data, headers=headers))


def test_the_server_is_whole_after_the_fuzz(server: Server, http: httpx.Client) -> None:
    assert http.get("/healthz").json()["status"] == "ok"
    # what the fuzz started ends with the lease
    http.delete("/v1/servers/lease", headers=auth(KEY))
    with server.client() as client:
        run = client.swarms.start("echo whole", count=1, size=TINY)
        done = wait_for(client, run["id"])
    assert done["sandboxes"][0]["stdoutTail"] == "whole\n"
    log = (server.state_dir.parent / f"{server.state_dir.name}.log").read_text()
    assert "Traceback" not in log, log[-3000:]
