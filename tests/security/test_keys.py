"""Keys: what the key each sandbox is given reaches, and what outlives what.

A sandbox's key reaches only what the sandbox made (runs, sandboxes, and what those made in
turn); it dies with the sandbox; keys made for an account die when the account's key is
removed from the server; the store keeps only hashes of keys.
"""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from inspect_swarm.client import AuthenticationError

from ..server.engines.test_sandboxes import TINY
from ..servers import start_server, wait_for, wait_until
from .conftest import KEY, OTHER_KEY, Server, in_sandbox

PRELUDE = r'''
import base64, json, os, time, urllib.error, urllib.request

URL, KEY = os.environ["MARITIME_API_URL"], os.environ["MARITIME_API_KEY"]
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(method, path, body=None, headers=None, key=KEY, raw=None):
    """(status, parsed body) of one request to the server."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    sent = {"Authorization": "Bearer " + key, "X-API-KEY": key,
            "Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(URL + path, data=data, method=method, headers=sent)
    try:
        with OPENER.open(request, timeout=60) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode(errors="replace")


def envd(method, sandbox_id, token, path, data=None):
    """(status, body) of a file call to the E2B daemon of `sandbox_id` with `token`."""
    headers = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token,
               "Content-Type": "application/octet-stream"}
    return call(method, "/files?username=root&path=" + path, headers=headers, raw=data)


def wait(run_id):
    """The run once it has completed (or the refusal to show it)."""
    for _ in range(600):
        status, run = call("GET", "/api/swarms/" + run_id)
        if status != 200 or run["status"] == "completed":
            return status, run
        time.sleep(0.1)
    raise TimeoutError(run_id)


def start(command, **fields):
    body = {"command": command, "count": 1, "size": {"vcpus": 1, "memoryGb": 1}, **fields}
    return call("POST", "/api/swarms", body)


def report(**found):
    print(json.dumps(found))
'''


def attack(server: Server, code: str, **given: str) -> Any:
    """Run `code` (after `PRELUDE`, with `given` as variables) in a sandbox of `KEY`'s; what
    it reported."""
    variables = "".join(f"{name} = {value!r}\n" for name, value in given.items())
    script = PRELUDE + variables + textwrap.dedent(code)
    sandbox = in_sandbox(server, f"python3 - <<'PY'\n{script}\nPY\n")
    assert sandbox["status"] == "succeeded", sandbox["stderrTail"]
    return json.loads(str(sandbox["stdoutTail"]).splitlines()[-1])


def _sleeper(client: Any) -> str:
    run = client.swarms.start("sleep 60", count=1, size=TINY)
    wait_until(lambda: client.swarms.get(run["id"])["counts"]["running"] == 1)
    return str(run["id"])


# --- the attacks ----------------------------------------------------------------------


def test_a_sandbox_cannot_see_or_cancel_the_accounts_other_runs_or_its_own(
    server: Server,
) -> None:
    with server.client() as client:
        victim = _sleeper(client)
        found = attack(
            server,
            """
            own = os.environ["MARITIME_SWARM_ID"]
            report(
                listed=[run["id"] for run in call("GET", "/api/swarms")[1]["swarms"]],
                get=call("GET", "/api/swarms/" + VICTIM)[0],
                results=call("GET", "/api/swarms/" + VICTIM + "/results")[0],
                cancel=call("POST", "/api/swarms/" + VICTIM + "/cancel")[0],
                own=call("GET", "/api/swarms/" + own)[0],
                cancel_own=call("POST", "/api/swarms/" + own + "/cancel")[0],
                own_sandbox=call("GET", "/v1/sandboxes/" + os.uname().nodename)[0],
            )
            """,
            VICTIM=victim,
        )
        assert found == {
            "listed": [],
            "get": 404,
            "results": 404,
            "cancel": 404,
            "own": 404,
            "cancel_own": 404,
            "own_sandbox": 404,
        }
        assert client.swarms.get(victim)["counts"]["running"] == 1  # never cancelled
        client.swarms.cancel(victim)
        client.servers.release()


def test_a_sandbox_cannot_release_the_lease_or_learn_its_key(server: Server) -> None:
    with server.client() as client:
        lease = client.servers.lease()
        found = attack(
            server,
            """
            servers = call("GET", "/v1/servers")[1]
            leased = call("POST", "/v1/servers/lease")
            report(
                release=call("DELETE", "/v1/servers/lease")[0],
                listed=servers["lease"]["apiKey"] == KEY == servers["lease"]["env"]["E2B_API_KEY"],
                leased=[leased[0], leased[1]["apiKey"] == KEY],
                keys=[servers["lease"]["apiKey"], leased[1]["apiKey"]],
            )
            """,
        )
        assert found["release"] == 403
        assert found["listed"] is True and found["leased"] == [200, True]
        assert lease["apiKey"] not in found["keys"]  # only its own key, never the lease's
        assert client.servers.list()["lease"]["id"] == lease["id"]  # still open
        client.servers.release()


def test_a_sandbox_cannot_reach_another_sandbox_or_its_daemon(server: Server) -> None:
    secret = "s3cret-of-the-victim"
    with server.client() as client, server.http() as http:
        victim = client.sandboxes.create(size=TINY)
        planted = http.post(
            "/files",
            params={"path": "/tmp/secret", "username": "root"},
            content=secret,
            headers={
                "E2b-Sandbox-Id": victim["sandboxId"],
                "X-Access-Token": victim["envdAccessToken"],
            },
        )
        assert planted.status_code == 200
        found = attack(
            server,
            """
            tokens = {""}
            answers = {}
            for name, method, path in [
                ("list", "GET", "/v1/sandboxes"),
                ("get", "GET", "/v1/sandboxes/" + VICTIM),
                ("kill", "DELETE", "/v1/sandboxes/" + VICTIM),
                ("e2b_list", "GET", "/v2/sandboxes"),
                ("e2b_get", "GET", "/sandboxes/" + VICTIM),
                ("e2b_connect", "POST", "/sandboxes/" + VICTIM + "/connect"),
                ("e2b_timeout", "POST", "/sandboxes/" + VICTIM + "/timeout"),
                ("e2b_kill", "DELETE", "/sandboxes/" + VICTIM),
            ]:
                status, body = call(method, path, {"timeout": 30} if "timeout" in path else None)
                answers[name] = status
                for item in body.get("sandboxes", []) if isinstance(body, dict) else body:
                    if isinstance(item, dict):
                        tokens.add(item.get("envdAccessToken", ""))
                if isinstance(body, dict):
                    tokens.add(body.get("envdAccessToken", ""))
            # a token it may have, its own child's, opens only that child
            status, child = call("POST", "/v1/sandboxes", {"size": {"vcpus": 1, "memoryGb": 1}})
            tokens.add(child["envdAccessToken"])
            reads = [envd("GET", VICTIM, token, "/tmp/secret") for token in sorted(tokens)]
            writes = [envd("POST", VICTIM, t, "/tmp/secret", b"owned") for t in sorted(tokens)]
            mine = envd("POST", child["sandboxId"], child["envdAccessToken"], "/tmp/x", b"x")
            call("DELETE", "/v1/sandboxes/" + child["sandboxId"])
            report(answers=answers, reads=reads, writes=writes, child=[status, mine[0]])
            """,
            VICTIM=victim["sandboxId"],
        )
        assert found["answers"] == {
            "list": 200,
            "get": 404,
            "kill": 404,
            "e2b_list": 200,
            "e2b_get": 404,
            "e2b_connect": 404,
            "e2b_timeout": 404,
            "e2b_kill": 404,
        }
        assert [status for status, _ in found["reads"] + found["writes"]] == [401] * 4
        assert secret not in json.dumps(found)
        assert found["child"] == [201, 200]
        read = http.get(
            "/files",
            params={"path": "/tmp/secret", "username": "root"},
            headers={
                "E2b-Sandbox-Id": victim["sandboxId"],
                "X-Access-Token": victim["envdAccessToken"],
            },
        )
        assert read.text == secret  # untouched, and the victim still runs
        client.sandboxes.kill(victim["sandboxId"])
        client.servers.release()


def test_an_idempotency_key_of_the_account_does_not_answer_a_sandbox(server: Server) -> None:
    body = {"command": "true", "count": 1, "size": {"vcpus": 1, "memoryGb": 1}}
    with server.http() as http, server.client() as client:
        made = http.post("/api/swarms", json=body, headers={"Idempotency-Key": "evals-1"})
        assert made.status_code == 201
        found = attack(
            server,
            """
            status, run = call("POST", "/api/swarms", BODY, {"Idempotency-Key": "evals-1"})
            again = call("POST", "/api/swarms", BODY, {"Idempotency-Key": "evals-1"})
            report(status=status, id=run["id"], again=[again[0], again[1]["id"]])
            """,
            BODY=body,
        )
        # the sandbox gets a run of its own, and its own key's retries find that one
        assert found["status"] == 201 and found["id"] != made.json()["id"]
        assert found["again"] == [200, found["id"]]
        wait_for(client, found["id"])
        client.servers.release()


def test_a_sandbox_key_dies_with_its_sandbox(server: Server) -> None:
    e2b = pytest.importorskip("e2b")
    found = attack(server, "report(key=base64.b64encode(KEY.encode()).decode())")
    leaked = base64.b64decode(found["key"]).decode()
    with server.client(leaked) as thief, pytest.raises(AuthenticationError):
        thief.swarms.list()
    with server.client() as client:
        box = client.sandboxes.create(size=TINY)
        sandbox = e2b.Sandbox.connect(
            box["sandboxId"], api_key=KEY, api_url=server.url, sandbox_url=server.url
        )
        leaked = sandbox.commands.run("echo $E2B_API_KEY").stdout.strip()
        with server.client(leaked) as holder:
            assert holder.sandboxes.list() == []  # works while its sandbox lives
        client.sandboxes.kill(box["sandboxId"])
        with server.client(leaked) as thief, pytest.raises(AuthenticationError):
            thief.sandboxes.create(size=TINY)
        client.servers.release()


def test_keys_are_stored_hashed_and_the_state_is_the_owners_alone(server: Server) -> None:
    with server.client() as client:
        lease_key = client.servers.lease()["apiKey"]
        found = attack(server, "report(key=base64.b64encode(KEY.encode()).decode())")
        sandbox_key = base64.b64decode(found["key"]).decode()
        files = [server.state_dir / name for name in ("swarm.db", "swarm.db-wal", "swarm.db-shm")]
        stored = b"".join(path.read_bytes() for path in files)
        assert lease_key.encode() not in stored and sandbox_key.encode() not in stored
        assert lease_key.startswith("mlk_") and sandbox_key.startswith("mlk_")
        ready = server.state_dir.parent / f"{server.state_dir.name}.ready"
        assert _mode(server.state_dir) == 0o700
        assert [_mode(path) for path in [ready, *files]] == [0o600] * 4
        client.servers.release()


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_removing_an_accounts_key_revokes_its_keys_and_frees_the_server(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = start_server(state, "--memory-gib", "4", keys=(KEY, OTHER_KEY))
    try:
        with first.client() as client:
            lease_key = client.servers.lease()["apiKey"]
            run = client.swarms.start("sleep 60", count=2, concurrency=1, size=TINY)
            client.sandboxes.create(size=TINY)
            wait_until(lambda: client.swarms.get(run["id"])["counts"]["running"] == 1)
    finally:
        first.kill()
    second = start_server(state, "--memory-gib", "4", keys=(OTHER_KEY,))
    try:
        with second.client(lease_key) as thief, pytest.raises(AuthenticationError):
            thief.swarms.list()
        with second.client(OTHER_KEY) as other:  # the server is free for another account
            done = wait_for(other, other.swarms.start("true", count=1, size=TINY)["id"])
            assert done["counts"]["succeeded"] == 1
            other.servers.release()
    finally:
        second.kill()
    third = start_server(state, "--memory-gib", "4", keys=(KEY, OTHER_KEY))
    try:
        with third.client(lease_key) as thief, pytest.raises(AuthenticationError):
            thief.swarms.list()  # its account is back, its lease is not
        with third.client() as client:
            ended = client.swarms.get(run["id"])
            why = "closed: the account's key was removed from the server"
            assert (
                ended["error"] == f"the server's lease ended ({why}): every sandbox on it was ended"
            )
            assert ended["status"] == "completed"
            assert ended["sandboxes"][1]["error"] == ended["error"]  # the queued one never ran
    finally:
        third.kill()


# --- what a sandbox's key may do --------------------------------------------------------


CHECK = (
    PRELUDE
    + """
parent = os.environ["PARENT_KEY"]
while call("GET", "/api/swarms", key=parent)[0] != 401:  # until its parent sandbox has ended
    time.sleep(0.1)
report(listed=call("GET", "/api/swarms")[0])
"""
)
CHILD = (
    PRELUDE
    + f"CHECK = {CHECK!r}\n"
    + """
# one grandchild to be cancelled, one that uses its key after this sandbox has ended
sleeper = start("sleep 60")[1]["id"]
files, env = {"/check.py": CHECK}, {"PARENT_KEY": KEY}
checker = start("python3 /check.py", files=files, env=env)[1]["id"]
listed = [run["id"] for run in call("GET", "/api/swarms")[1]["swarms"]]
own = call("GET", "/api/swarms/" + os.environ["MARITIME_SWARM_ID"])[0]
report(sleeper=sleeper, checker=checker, listed=listed, own=own)
"""
)


def test_a_sandbox_starts_follows_and_cancels_its_children(server: Server) -> None:
    with server.client() as client:
        found = attack(
            server,
            """
            made, done = start("echo $MARITIME_SWARM_INDEX", count=2)
            waited = wait(done["id"])
            results = call("GET", "/api/swarms/" + done["id"] + "/results")
            _, sleeping = start("sleep 60")
            cancelled = call("POST", "/api/swarms/" + sleeping["id"] + "/cancel")[0]
            stopped = wait(sleeping["id"])[1]
            listed = [run["id"] for run in call("GET", "/api/swarms")[1]["swarms"]]
            status, box = call("POST", "/v1/sandboxes", {"size": {"vcpus": 1, "memoryGb": 1}})
            mine = [s["sandboxId"] for s in call("GET", "/v1/sandboxes")[1]["sandboxes"]]
            e2b = [s["sandboxID"] for s in call("GET", "/v2/sandboxes")[1]]
            wrote = envd("POST", box["sandboxId"], box["envdAccessToken"], "/tmp/a", b"hi")[0]
            read = envd("GET", box["sandboxId"], box["envdAccessToken"], "/tmp/a")[1]
            killed = call("DELETE", "/v1/sandboxes/" + box["sandboxId"])[1]["endReason"]
            report(
                made=made, ids=[done["id"], sleeping["id"]], listed=listed,
                tails=[s["stdoutTail"] for s in waited[1]["sandboxes"]],
                results=results[1].count("succeeded"), cancelled=cancelled,
                stopped=[s["status"] for s in stopped["sandboxes"]],
                box=[status, box["sandboxId"] in mine, box["sandboxId"] in e2b, wrote, read],
                killed=killed,
            )
            """,
        )
        done_id, sleeping_id = found["ids"]
        assert found["made"] == 201 and found["listed"] == [sleeping_id, done_id]
        assert found["tails"] == ["0\n", "1\n"] and found["results"] == 2
        assert found["cancelled"] == 200 and found["stopped"] == ["cancelled"]
        assert found["box"] == [201, True, True, 200, "hi"] and found["killed"] == "killed"
        # the account reaches everything its sandboxes made
        assert {done_id, sleeping_id} <= {run["id"] for run in client.swarms.list()}
        client.servers.release()


def test_a_childs_children_are_within_reach_of_its_parent_only(server: Server) -> None:
    with server.client() as client:
        found = attack(
            server,
            """
            _, child = start("python3 /child.py", files={"/child.py": CHILD})
            _, child = wait(child["id"])
            seen = json.loads(child["sandboxes"][0]["stdoutTail"])
            sleeper = call("GET", "/api/swarms/" + seen["sleeper"])[1]["status"]
            cancelled = call("POST", "/api/swarms/" + seen["sleeper"] + "/cancel")[0]
            listed = [run["id"] for run in call("GET", "/api/swarms")[1]["swarms"]]
            checked = wait(seen["checker"])[1]["sandboxes"][0]
            report(child=child["id"], seen=seen, sleeper=sleeper, cancelled=cancelled,
                   listed=listed, checked=[checked["status"], checked["stdoutTail"]])
            """,
            CHILD=CHILD,
        )
        seen = found["seen"]
        # the child reaches its own children, not its own run; its parent reaches all
        assert seen["listed"] == [seen["checker"], seen["sleeper"]] and seen["own"] == 404
        assert found["listed"] == [seen["checker"], seen["sleeper"], found["child"]]
        assert found["cancelled"] == 200 and found["sleeper"] in ("queued", "running")
        wait_until(lambda: client.swarms.get(seen["sleeper"])["status"] == "completed")
        assert client.swarms.get(seen["sleeper"])["counts"]["cancelled"] == 1
        # a grandchild's key works on after its parent sandbox ended
        assert found["checked"] == ["succeeded", '{"listed": 200}\n']
        client.servers.release()


PARENT = (
    PRELUDE
    + """
start("sleep 60", count=2, concurrency=1)
call("POST", "/v1/sandboxes", {"size": {"vcpus": 1, "memoryGb": 1}})
"""
)


def test_children_end_with_the_lease(server: Server) -> None:
    with server.client() as client:
        parent = client.swarms.start(
            "python3 /parent.py && sleep 60", count=1, size=TINY, files={"/parent.py": PARENT}
        )

        def newer() -> list[str]:
            ids = [run["id"] for run in client.swarms.list()]
            return ids[: ids.index(parent["id"])]

        wait_until(lambda: newer() and client.sandboxes.list())
        (child,) = newer()
        (box,) = client.sandboxes.list()
        client.servers.release()
        for run_id in (parent["id"], child):
            ended = wait_for(client, run_id, timeout=20)
            assert ended["error"] == (
                "the server's lease ended (released): every sandbox on it was ended"
            )
            assert {s["status"] for s in ended["sandboxes"]} == {"failed"}
        ended_box = client.sandboxes.get(box["sandboxId"])
        assert (ended_box["status"], ended_box["endReason"]) == ("ended", "lease released")
