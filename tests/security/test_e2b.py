"""Attacks on what the E2B surface adds to a sandbox: terminals, watches, files by URL.

Played with the unmodified e2b SDK, as a user of one sandbox who goes after another's.
"""

from __future__ import annotations

import gzip
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..servers import OTHER_KEY, Server, point_e2b_at
from .conftest import served

e2b = pytest.importorskip("e2b")


def daemon_headers(sandbox: e2b.Sandbox) -> dict[str, str]:
    """What a request to a sandbox's daemon names it with."""
    return {"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": str(sandbox._envd_access_token)}


@pytest.fixture
def two(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[e2b.Sandbox, e2b.Sandbox]]:
    """Two sandboxes: the victim's and the attacker's."""
    point_e2b_at(server, monkeypatch)
    victim = e2b.Sandbox.create()
    attacker = e2b.Sandbox.create()
    yield victim, attacker
    attacker.kill()
    victim.kill()


def test_a_terminal_is_reached_only_through_its_own_sandbox(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    term = victim.pty.create(e2b.PtySize(rows=24, cols=80))
    # its pid named through another sandbox: that sandbox's processes, none of them it
    with pytest.raises(e2b.NotFoundException):
        attacker.pty.send_stdin(term.pid, b"touch /tmp/owned\n")
    with pytest.raises(e2b.NotFoundException):
        attacker.pty.resize(term.pid, e2b.PtySize(rows=1, cols=1))
    assert not attacker.pty.kill(term.pid)
    # the victim's sandbox named with the attacker's access token, or another account's key
    headers = {"E2b-Sandbox-Id": victim.sandbox_id, "Content-Type": "application/json"}
    for token in (str(attacker._envd_access_token), ""):
        answer = httpx.post(
            f"{server.url}/process.Process/SendInput",
            json={"process": {"pid": term.pid}, "input": {"pty": "aWQK"}},
            headers={**headers, "X-Access-Token": token},
        )
        assert answer.status_code == 401, answer.text
    with pytest.raises(e2b.SandboxException):
        e2b.Sandbox.connect(victim.sandbox_id, api_key=OTHER_KEY)
    # a sandbox's terminals are its own devpts: the attacker sees none of the victim's
    assert attacker.commands.run("ls /dev/pts").stdout.split() == ["ptmx"]
    own = attacker.pty.create(e2b.PtySize(rows=24, cols=80))
    assert attacker.commands.run("ls /dev/pts").stdout.split() == ["0", "ptmx"]
    assert victim.pty.kill(term.pid) and attacker.pty.kill(own.pid)
    assert not victim.files.exists("/tmp/owned")
    # its own key still reaches it
    assert e2b.Sandbox.connect(victim.sandbox_id).sandbox_id == victim.sandbox_id


def test_a_watch_sees_its_own_sandbox_only(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    mine = victim.files.watch_dir("/tmp")
    # the victim's watcher named through the attacker's sandbox: none of its own
    answer = httpx.post(
        f"{server.url}/filesystem.Filesystem/GetWatcherEvents",
        json={"watcherId": mine._watcher_id},
        headers=daemon_headers(attacker),
    )
    assert answer.status_code == 404 and answer.json()["code"] == "not_found", answer.text
    # links to the host's root and `..` past the root lead to the attacker's own /tmp
    attacker.commands.run("ln -s / /tmp/up && ln -s /proc/1/root /tmp/init")
    watches = [attacker.files.watch_dir(path) for path in ("/tmp/up/tmp", "/../../tmp")]
    with pytest.raises(e2b.SandboxException, match="Permission denied"):
        attacker.files.watch_dir("/tmp/init/tmp")  # PID 1's root: not `user`'s to follow
    Path(f"/tmp/host-{attacker.sandbox_id}").write_text("the host's")
    victim.files.write(f"/tmp/victim-{attacker.sandbox_id}", "the victim's")
    attacker.files.write("/tmp/inside", "the attacker's")
    for watch in watches:
        names: set[str] = set()
        deadline = time.monotonic() + 30  # a safety net: the attacker's own change comes
        while "inside" not in names and time.monotonic() < deadline:
            names |= {event.name for event in watch.get_new_events()}
        assert "inside" in names and not any(attacker.sandbox_id in name for name in names)
    Path(f"/tmp/host-{attacker.sandbox_id}").unlink()
    assert f"victim-{attacker.sandbox_id}" in {e.name for e in mine.get_new_events()}


def test_a_gzip_body_that_inflates_past_the_file_limit_is_refused_unwritten(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, _ = two
    headers = {**daemon_headers(victim), "Content-Encoding": "gzip"}
    # 300 MiB of zeros in a fraction of a MiB: over the file limit (256 MiB) once inflated
    bomb = gzip.compress(bytes(300 * 1024 * 1024), compresslevel=9)
    answer = httpx.post(
        f"{server.url}/files",
        params={"path": "/tmp/bomb"},
        content=bomb,
        headers=headers,
        timeout=60,  # inflating 256 MiB before the refusal takes seconds on a loaded machine
    )
    assert answer.status_code == 413 and "limit" in answer.json()["message"], answer.text
    assert not victim.files.exists("/tmp/bomb")
    assert server.health()["status"] == "ok"


def test_a_signed_url_opens_its_one_operation_path_and_user_only(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    victim.files.write("/tmp/mine", "the victim's")
    victim.commands.run("echo secret > /root/secret && echo x > /tmp/other", user="root")
    url = httpx.URL(victim.download_url("/tmp/mine"))
    assert httpx.get(url).text == "the victim's"
    refused = [
        url.copy_set_param("path", "/tmp/other"),  # another path
        url.copy_set_param("username", "root"),  # another user
        url.copy_set_param("signature", "v1_" + "A" * 43),  # a made-up signature
        url.copy_remove_param("signature").copy_set_param("signature", ""),
        httpx.URL(victim.download_url("/tmp/mine", use_signature_expiration=600)).copy_set_param(
            "signature_expiration",
            "99999999999",  # a later expiry than the one signed
        ),
    ]
    for forged in refused:
        answer = httpx.get(forged)
        assert answer.status_code == 401, (forged, answer.text)
    # the Basic user of a header does not stand in for the signed one
    assert (
        httpx.get(url.copy_set_param("path", "/root/secret"), auth=("root", "")).status_code == 401
    )
    assert httpx.get(url, auth=("root", "")).text == "the victim's"
    # a read's URL does not write, and a write's writes only its own path
    assert httpx.post(url, content=b"overwritten").status_code == 401
    upload = victim.upload_url("/tmp/drop")
    sent = httpx.post(upload, files={"file": ("/tmp/mine", b"x")})
    assert sent.status_code == 200 and victim.files.read("/tmp/mine") == "the victim's"
    assert httpx.post(upload.replace("drop", "mine"), files={"f": ("y", b"x")}).status_code == 401
    # the attacker's own signature names the attacker's sandbox, never the victim's
    attacker.files.write("/tmp/mine", "the attacker's")
    theirs = httpx.URL(attacker.download_url("/tmp/mine"))
    answer = httpx.get(theirs, headers={"E2b-Sandbox-Id": victim.sandbox_id})
    assert answer.text == "the attacker's"
    assert victim.files.read("/tmp/mine") == "the victim's"


def test_metadata_headers_no_file_system_takes_are_refused_before_writing(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, _ = two
    headers = daemon_headers(victim)
    refused = [
        {"X-Metadata-key": "\x7f"},  # not printable
        {"X-Metadata-key": "v" * 4097},  # past what a value may hold
        {"X-Metadata-" + "k" * 129: "v"},  # past what a key may hold
        {f"X-Metadata-k{i}": "v" for i in range(65)},  # more than a file takes
    ]
    for extra in refused:
        answer = httpx.post(
            f"{server.url}/files",
            params={"path": "/tmp/meta"},
            content=b"x",
            headers={**headers, **extra},
        )
        assert answer.status_code == 400 and "X-Metadata" in answer.json()["message"]
    assert not victim.files.exists("/tmp/meta")
    # a key is a name in the `user.` namespace only: never `trusted.` or `security.` ones
    answer = httpx.post(
        f"{server.url}/files",
        params={"path": "/tmp/meta"},
        content=b"x",
        headers={**headers, "X-Metadata-..%2Fsecurity.capability": "v"},
    )
    assert answer.status_code == 200, answer.text
    listed = victim.commands.run("python3 -c \"import os; print(os.listxattr('/tmp/meta'))\"")
    assert listed.stdout.strip() == "['user...%2fsecurity.capability']"


def test_a_sandbox_is_paused_and_resumed_only_within_its_owners_reach(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    # another account's key, and a sandbox's own key (its children alone), reach no other
    sandbox_key = attacker.commands.run("printenv E2B_API_KEY").stdout.strip()
    for key in (OTHER_KEY, sandbox_key):
        for call in ("pause", "resume", "connect"):
            answer = httpx.post(
                f"{server.url}/sandboxes/{victim.sandbox_id}/{call}",
                json={"timeout": 30},
                headers={"X-API-KEY": key},
            )
            assert answer.status_code == 404, (call, answer.text)
    assert e2b.Sandbox.get_info(victim.sandbox_id).state == e2b.SandboxState.RUNNING
    # paused, its daemon takes no call even with its own token (its processes are frozen,
    # and nothing runs in it until its owner resumes it)
    victim.pause()
    for path in ("/health", "/files?path=/etc/hostname"):
        answer = httpx.get(f"{server.url}{path}", headers=daemon_headers(victim))
        assert answer.status_code == 502, answer.text
    with pytest.raises(e2b.SandboxException):
        e2b.Sandbox.connect(victim.sandbox_id, api_key=OTHER_KEY)
    assert e2b.Sandbox.get_info(victim.sandbox_id).state == e2b.SandboxState.PAUSED


def _port(server: Server, sandbox: e2b.Sandbox, port: int, token: str = "") -> httpx.Response:
    """A request to `port` of `sandbox` through the server, as `get_host` routes it."""
    headers = {"host": sandbox.get_host(port)} | (
        {"e2b-traffic-access-token": token} if token else {}
    )
    return httpx.get(f"{server.url}/", headers=headers, timeout=30)


def test_a_port_reaches_its_own_sandboxs_loopback_only(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    # a server of the host's, on loopback: through a sandbox's port it is that sandbox's
    with socket.create_server(("127.0.0.1", 0)) as host_server:
        port = host_server.getsockname()[1]
        answer = _port(server, attacker, port)
        assert answer.status_code == 502, answer.text
        assert "nothing listens" in answer.json()["message"]
        host_server.settimeout(0)
        with pytest.raises(BlockingIOError):
            host_server.accept()  # no connection ever reached it
    # the attacker listens on a port; the victim's same port is the victim's (nothing there)
    listening = attacker.commands.run(
        "python3 -m http.server 8001 --bind 127.0.0.1", background=True
    )
    deadline = time.monotonic() + 60
    while _port(server, attacker, 8001).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert _port(server, victim, 8001).status_code == 502
    listening.kill()
    # no port number outside TCP's, nor a name that is not a sandbox's
    for host in (f"0-{victim.sandbox_id}.x", f"70000-{victim.sandbox_id}.x", "80-nobody.x"):
        answer = httpx.get(f"{server.url}/", headers={"host": host}, timeout=30)
        assert answer.status_code in (400, 502), answer.text


SEEN = """\
import http.server, sys

class Seen(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.answer(f"GET {self.path}")

    def do_POST(self):
        # the body's bytes as they came, to the end of the connection
        self.answer(f"POST {self.path} {len(self.rfile.read())}")

    def answer(self, seen):
        with open("/tmp/seen", "a") as kept:
            kept.write(seen + "\\n")
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Seen).serve_forever()
"""


def test_a_request_to_a_port_is_held_to_the_servers_body_limit(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, _ = two
    victim.files.write("/tmp/seen.py", SEEN)
    listening = victim.commands.run("python3 /tmp/seen.py 8002", background=True)
    deadline = time.monotonic() + 60
    while _port(server, victim, 8002).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    address = server.url.removeprefix("http://").rsplit(":", 1)
    over = 17 * 1024 * 1024  # the server's body limit is 16 MiB
    with socket.create_connection((address[0], int(address[1])), timeout=30) as sock:
        # a head that declares a body over the limit: refused before any of it is read
        head = f"POST /big HTTP/1.1\r\nhost: {victim.get_host(8002)}\r\n"
        sock.sendall(f"{head}content-length: {over}\r\n\r\n".encode())
        answer = b"".join(iter(lambda: sock.recv(65536), b""))  # to the close it says
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b"body_too_large" in answer
    # a body sent in chunks with no length: cut at the limit
    chunks = (b"x" * 1024 * 1024 for _ in range(17))
    cut = httpx.post(
        f"{server.url}/chunked",
        headers={"host": victim.get_host(8002)},
        content=chunks,
        timeout=60,
    )
    assert cut.status_code == 413, cut.text
    # what the sandbox's server saw once the cut connection ended: not the first, and of
    # the second no more than the limit
    while "POST" not in (seen := victim.files.read("/tmp/seen")):
        assert time.monotonic() < deadline + 60
        time.sleep(0.1)
    listening.kill()
    [(path, size)] = [line.split()[1:] for line in seen.splitlines() if line.startswith("POST")]
    assert path == "/chunked" and int(size) <= 16 * 1024 * 1024 + 17 * 16  # and chunk sizes


def test_a_private_port_opens_to_its_own_traffic_token_only(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(server, monkeypatch)
    victim = e2b.Sandbox.create(network={"allow_public_traffic": False})
    attacker = e2b.Sandbox.create(network={"allow_public_traffic": False})
    try:
        assert victim.traffic_access_token != attacker.traffic_access_token
        for token in ("", str(attacker.traffic_access_token), str(victim._envd_access_token)):
            assert _port(server, victim, 8000, token).status_code == 403
        # another account reaches neither the sandbox nor, so, its token
        with pytest.raises(e2b.SandboxException):
            e2b.Sandbox.connect(victim.sandbox_id, api_key=OTHER_KEY)
    finally:
        attacker.kill()
        victim.kill()


def reaches_no_snapshot(server: Server, key: str, sandbox_id: str, names: tuple[str, str]) -> None:
    """`key` reaches neither the snapshot of `names` (its id and name) nor the sandbox
    `sandbox_id` it was made of: it neither lists, uses, deletes, forks nor snapshots."""
    with httpx.Client(base_url=server.url, headers={"X-API-KEY": key}, timeout=60) as http:
        listed = http.get("/snapshots", params={"sandboxID": sandbox_id})
        assert listed.status_code == 200 and listed.json() == []
        for template in names:
            made = http.post("/sandboxes", json={"templateID": template})
            assert made.status_code == 404, made.text
        assert http.delete(f"/templates/{names[0]}").status_code == 404
        for call in ("fork", "snapshots"):
            answer = http.post(f"/sandboxes/{sandbox_id}/{call}", json={})
            assert answer.status_code == 404, (call, answer.text)


def test_a_snapshot_or_fork_stays_within_its_owners_reach(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    victim.files.write("secret.txt", "the victim's")
    snapshot = victim.create_snapshot(name="private")
    # another account's key, and a sandbox's own key (its children alone), reach neither the
    # victim's snapshot (by id or name) nor its sandbox
    sandbox_key = attacker.commands.run("printenv E2B_API_KEY").stdout.strip()
    for key in (OTHER_KEY, sandbox_key):
        reaches_no_snapshot(server, key, victim.sandbox_id, (snapshot.snapshot_id, "private"))
    # the owner's is untouched
    owned = [s.snapshot_id for s in e2b.Sandbox.list_snapshots().next_items()]
    assert owned == [snapshot.snapshot_id]
    assert e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)


def test_a_snapshot_holds_its_own_sandboxs_files_and_links_as_links(
    server: Server, two: tuple[e2b.Sandbox, e2b.Sandbox]
) -> None:
    victim, attacker = two
    snapshot_holds_its_own_files(victim, attacker, server.state_dir, server.state_dir / "snapshots")


def snapshot_holds_its_own_files(
    victim: e2b.Sandbox, attacker: e2b.Sandbox, state: Path, snapshots: Path
) -> None:
    """A snapshot of `attacker`, made beside `victim`, holds none of the victim's files, and
    its links (to the host's files as the server sees paths, to `state` where the sandboxes
    live, to another sandbox's root) as links, in `snapshots` and in a sandbox made from it."""
    victim.files.write("/tmp/victim-tmp", "the victim's")
    victim.files.write("/home/user/victim-home", "the victim's")
    links = {"shadow": "/etc/shadow", "state": str(state), "init": "/proc/1/root"}
    for name, target in links.items():
        attacker.commands.run(f"ln -s {target} /home/user/{name} && ln -s {target} /tmp/{name}")
    snapshot = attacker.create_snapshot()
    try:
        kept = list(snapshots.rglob("*"))
        assert not any(path.name.startswith("victim-") for path in kept)
        found = [path for path in kept if path.name in links]
        assert {path.name for path in found} == set(links)
        assert all(p.is_symlink() and str(p.readlink()) == links[p.name] for p in found)
        with e2b.Sandbox.create(snapshot.snapshot_id, timeout=120) as copy:
            for name, target in links.items():
                shown = copy.commands.run(f"readlink /home/user/{name} /tmp/{name}").stdout
                assert shown == f"{target}\n{target}\n"
            assert not copy.files.exists("/tmp/victim-tmp")
            assert not copy.files.exists("/home/user/victim-home")
    finally:
        e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose accounts' snapshots may take 50 MiB in all."""
    yield from served(tmp_path_factory, "capped", "--memory-gib", "4", "--snapshot-gib", "0.05")


def _kept_bytes(server: Server) -> int:
    found = (server.state_dir / "snapshots").rglob("*")
    return sum(path.lstat().st_blocks * 512 for path in found)


def test_snapshots_cannot_fill_the_disk_past_their_cap(
    capped: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_e2b_at(capped, monkeypatch)
    cap = 50 * 1024**2
    with e2b.Sandbox.create() as sbx:
        sbx.commands.run("head -c 30000000 /dev/urandom > /home/user/a")
        first = sbx.create_snapshot()
        kept = _kept_bytes(capped)
        assert 30_000_000 <= kept <= cap
        # a second would pass the cap: refused, nothing copied
        with pytest.raises(e2b.SandboxException, match="snapshots: your account's take"):
            sbx.create_snapshot()
        assert _kept_bytes(capped) == kept
        # a fork writes its own disk straight from the sandbox's: nothing is kept aside
        (fork,) = sbx.fork()
        assert isinstance(fork, e2b.Sandbox)
        with fork:
            assert fork.commands.run("wc -c < /home/user/a").stdout == "30000000\n"
        assert _kept_bytes(capped) == kept
        # nor does one pass it through /tmp, which is held in memory
        e2b.Sandbox.delete_snapshot(first.snapshot_id)
        sbx.commands.run("head -c 30000000 /dev/urandom > /tmp/b")
        with pytest.raises(e2b.SandboxException, match="files to copy"):
            sbx.create_snapshot()
        assert _kept_bytes(capped) == 0


@pytest.fixture(scope="module")
def sharing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """A server that shares a host directory under /tmp, so under each sandbox's /tmp too."""
    shared = tmp_path_factory.mktemp("shared")
    shared.chmod(0o755)
    for handle in served(tmp_path_factory, "sharing", "--memory-gib", "4", "--share", str(shared)):
        yield handle, shared


@pytest.fixture
def host_file(sharing: tuple[Server, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file of the shared directory, as the host wrote it, with the SDK pointed at the
    server that shares it."""
    server, shared = sharing
    point_e2b_at(server, monkeypatch)
    path = shared / "host-file"
    path.write_text("the host's")
    return path


def test_a_snapshot_neither_keeps_nor_writes_a_host_directory_shared_in_tmp(
    sharing: tuple[Server, Path], host_file: Path
) -> None:
    server, _ = sharing
    with e2b.Sandbox.create() as sbx:
        assert sbx.files.read(str(host_file), user="root") == "the host's"
        snapshot = sbx.create_snapshot()
    try:
        kept = [path.name for path in (server.state_dir / "snapshots").rglob("*")]
        assert "host-file" not in kept
        # a sandbox made from the snapshot sees the host's file as it is now, and leaves it so
        host_file.write_text("changed on the host")
        with e2b.Sandbox.create(snapshot.snapshot_id) as copy:
            assert copy.files.read(str(host_file), user="root") == "changed on the host"
        assert host_file.read_text() == "changed on the host"
    finally:
        e2b.Sandbox.delete_snapshot(snapshot.snapshot_id)


def test_a_fork_neither_copies_nor_writes_a_host_directory_shared_in_tmp(host_file: Path) -> None:
    with e2b.Sandbox.create() as sbx:
        sbx.files.write("/tmp/own", "the sandbox's")
        [fork] = sbx.fork()
        assert isinstance(fork, e2b.Sandbox), fork
        with fork:
            assert fork.files.read("/tmp/own") == "the sandbox's"
            # the fork sees the host's directory itself, not a copy of it
            host_file.write_text("changed on the host")
            assert fork.files.read(str(host_file), user="root") == "changed on the host"
    assert host_file.read_text() == "changed on the host"
