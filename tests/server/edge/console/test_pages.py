"""The console over HTTP: its shell needs no key, its fragments and actions need the API's,
and each shows what that key reaches through the API."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ....servers import (
    KEY,
    OTHER_KEY,
    READ_ONLY_KEY,
    Server,
    needs_namespaces,
    run_script,
    start_server,
    wait_for,
)
from ...engines.test_sandboxes import TINY

pytestmark = needs_namespaces


def http(console: str, key: str | None = KEY) -> httpx.Client:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.Client(base_url=console, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def finished(server: Server) -> Iterator[dict[str, object]]:
    """A completed run of three sandboxes named `mixed`, the second of which fails."""
    with server.client() as client:
        run = client.swarms.start(
            'echo "out $MARITIME_SWARM_INDEX"; test "$MARITIME_SWARM_INDEX" != 1',
            count=3,
            size=TINY,
            name="mixed",
        )
        yield wait_for(client, run["id"])


def test_a_page_is_a_shell_that_shows_nothing_without_a_key(console: str) -> None:
    with http(console, key=None) as client:
        page = client.get("/")
        fragment = client.get("/fragments/runs")
    assert page.status_code == 200
    assert 'data-fragment="/fragments/runs"' in page.text
    assert 'id="key"' in page.text and 'name="key"' not in page.text  # never submitted
    assert fragment.status_code == 401


def test_every_answer_has_a_policy_that_admits_only_the_console_s_own_files(console: str) -> None:
    with http(console) as client:
        for path in ("/", "/static/console.js", "/fragments/runs", "/nowhere"):
            policy = client.get(path).headers["content-security-policy"]
            assert "script-src 'self'" in policy and "default-src 'none'" in policy
            assert "unsafe-inline" not in policy


def test_the_api_stays_on_its_own_port(server: Server, console: str) -> None:
    assert console != server.url
    with http(console) as client:
        assert client.get("/api/swarms").status_code == 404
    with server.http() as client:
        assert client.get("/api/swarms").status_code == 200
        assert client.get("/fragments/runs").status_code == 404


def test_the_runs_page_lists_the_key_s_runs_filtered_and_searched(
    console: str, finished: dict[str, object]
) -> None:
    run_id = str(finished["id"])
    with http(console) as client:
        listing = client.get("/fragments/runs").text
        by_prefix = client.get("/fragments/runs", params={"q": run_id[:8]}).text
        by_name = client.get("/fragments/runs", params={"q": "MIX"}).text
        queued = client.get("/fragments/runs", params={"status": "queued"}).text
    assert f"/runs/{run_id}" in listing and "mixed" in listing
    assert '<progress max="3" value="3">' in listing
    assert "2 succeeded" in listing and "1 failed" in listing
    assert f"/runs/{run_id}" in by_prefix and f"/runs/{run_id}" in by_name
    assert f"/runs/{run_id}" not in queued
    with http(console, OTHER_KEY) as client:
        assert f"/runs/{run_id}" not in client.get("/fragments/runs").text


def test_a_run_s_page_shows_its_spec_and_its_failed_sandboxes_first(
    server: Server, console: str, finished: dict[str, object]
) -> None:
    run_id = str(finished["id"])
    with http(console) as client:
        page = client.get(f"/fragments/runs/{run_id}").text
        failed = client.get(f"/fragments/runs/{run_id}", params={"status": "failed"}).text
    statuses = re.findall(r'<span class="status s-(\w+)">', page.split("<tbody>")[1])
    assert statuses == ["failed", "succeeded", "succeeded"]
    assert "1 vCPU, 1 GB" in page and "base" in page and "out 1" in page
    assert f"inspect-swarm swarms get {run_id}" in page
    assert f"{server.url}/api/swarms/{run_id}" in page  # the curl command
    assert re.findall(r'<span class="status s-(\w+)">', failed.split("<tbody>")[1]) == ["failed"]
    assert "show all" not in page and "(failed), failed first" in failed and "show all" in failed


def test_an_unchanged_fragment_is_answered_304(console: str, finished: dict[str, object]) -> None:
    path = f"/fragments/runs/{finished['id']}"
    with http(console) as client:
        first = client.get(path)
        again = client.get(path, headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and not again.content


def test_results_download_needs_the_key_and_is_the_api_s(
    server: Server, console: str, finished: dict[str, object]
) -> None:
    path = f"/files/runs/{finished['id']}/results.jsonl"
    with http(console) as client:
        lines = client.get(path).text.splitlines()
    with server.http() as client:
        assert lines == client.get(f"/api/swarms/{finished['id']}/results").text.splitlines()
    assert [json.loads(line)["status"] for line in lines] == ["succeeded", "failed", "succeeded"]
    with http(console, key=None) as client:
        assert client.get(path).status_code == 401
    with http(console, OTHER_KEY) as client:
        assert client.get(path).status_code == 404


def test_cancel_needs_a_key_that_may_provision(server: Server, console: str) -> None:
    with server.client() as swarms:
        run = swarms.swarms.start("sleep 60", count=2, size=TINY, name="long")
        path = f"/actions/runs/{run['id']}/cancel"
        with http(console, key=None) as client:
            assert client.post(path).status_code == 401
        with http(console, f"{READ_ONLY_KEY}") as client:
            assert client.post(path).status_code == 403
            assert "Cancel run" not in client.get(f"/fragments/runs/{run['id']}").text
        with http(console, OTHER_KEY) as client:
            assert client.post(path).status_code == 404
        with http(console) as client:
            assert client.get(path).status_code == 405  # no change by a GET
            assert "Cancel run" in client.get(f"/fragments/runs/{run['id']}").text
            assert client.post(path).json() == {"message": f"run {run['id']} cancelled"}
        done = wait_for(swarms, run["id"])
    assert {s["status"] for s in done["sandboxes"]} == {"cancelled"}  # type: ignore[attr-defined]


def test_the_lease_and_long_lived_sandboxes_pages(server: Server, console: str) -> None:
    with server.client() as swarms:
        box = swarms.sandboxes.create(size=TINY, metadata={"team": "<b>blue</b>"})
        try:
            with http(console) as client:
                listing = client.get("/fragments/sandboxes").text
                lease = client.get("/fragments/lease").text
                assert f"/sandboxes/{box['sandboxId']}" in listing
                assert "team=&lt;b&gt;blue&lt;/b&gt;" in listing
                assert "leased by you" in lease and "<meter" in lease
                assert "mlk_" not in lease  # the lease's key is the API's to show
                killed = client.post(f"/actions/sandboxes/{box['sandboxId']}/kill")
                assert killed.status_code == 200
                page = client.get(f"/fragments/sandboxes/{box['sandboxId']}").text
            assert "s-ended" in page and "End reason" in page
        finally:
            swarms.sandboxes.kill(box["sandboxId"])


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1])


def test_polling_consoles_leave_the_server_s_memory_as_it_was(
    server: Server, console: str, finished: dict[str, object]
) -> None:
    """A bounded stand-in for a console left open for an hour: thousands of polls, over more
    addresses than the fragments kept, grow nothing on the server."""
    paths = ["/fragments/runs", f"/fragments/runs/{finished['id']}", "/fragments/lease"]

    def poll(times: int) -> None:
        for i in range(times):
            client.get(paths[i % 3], params={"q": str(i % 400)})

    with http(console) as client:
        poll(400)
        before = _rss_kib(server.process.pid)
        poll(1600)
        after = _rss_kib(server.process.pid)
    assert after - before < 8 * 1024


def _events(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """The server-sent events of a stream: (kind, data)."""
    kind, data = "", []
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and kind:
            yield kind, "\n".join(data)
            kind, data = "", []


def test_a_stream_sends_the_fragment_again_when_it_changes(server: Server, console: str) -> None:
    with server.client() as swarms, http(console) as client:
        run = swarms.swarms.start("sleep 1", count=2, concurrency=1, size=TINY, name="live")
        sent = []
        headers = {"Accept": "text/event-stream"}
        with client.stream("GET", f"/fragments/runs/{run['id']}", headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            for kind, data in _events(stream):
                assert kind == "fragment"
                sent.append(data)
                if 's-completed">completed' in data:
                    break
    assert len(sent) >= 3  # queued or running, one ended, both ended
    assert len(set(sent)) == len(sent)  # only changes are sent


def test_a_stream_ends_when_its_key_stops_working(server: Server, console: str) -> None:
    with server.client() as swarms:
        lease_key = swarms.servers.lease()["apiKey"]
        headers = {"Accept": "text/event-stream"}
        with http(console, lease_key) as client:
            with client.stream("GET", "/fragments/runs", headers=headers) as stream:
                events = _events(stream)
                assert next(events)[0] == "fragment"
                swarms.servers.release()
                kind, data = next(kind_data for kind_data in events if kind_data[0] != "fragment")
            assert client.get("/fragments/runs").status_code == 401
    assert kind == "refused" and "sign in again" in data


def test_no_console_is_served_when_told_and_a_taken_port_is_refused_clearly(
    server: Server, tmp_path: Path
) -> None:
    quiet = start_server(tmp_path / "quiet", "--no-console", "--isolation", "process")
    try:
        assert "consoleUrl" not in json.loads((tmp_path / "quiet.ready").read_text())
    finally:
        quiet.kill()
    taken = str(httpx.URL(server.url).port)
    args = ("--port", "0", "--console-port", taken, "--state-dir", str(tmp_path / "taken"))
    refused = run_script("server", "--no-context", "--isolation", "process", *args)
    assert refused.returncode == 1
    assert f"--console-port: cannot listen on 127.0.0.1:{taken}" in refused.stderr
    assert "--no-console" in refused.stderr
