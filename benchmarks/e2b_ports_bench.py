"""A request through a sandbox's forwarded port, against the same request to a loopback server.

    .venv/bin/python benchmarks/e2b_ports_bench.py [--rounds 200]

Starts a local swarm server and one E2B sandbox running a small HTTP server, and the same
HTTP server on this machine's loopback, then measures, alternating so both see the same
load, a GET of each: (1) sent to the swarm server with the `Host` that `get_host` names, so
it is forwarded into the sandbox; (2) sent straight to the loopback server. Target: the
forwarded request at most 1.5x the direct one. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx
from e2b import Sandbox

from inspect_swarm.sandbox._local_server import LocalServer

SERVE = """\
import http.server, sys

class Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # head and body are two writes

    def do_GET(self):
        body = b"x" * 1024
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Answer).serve_forever()
"""
PORT = 8000


def _trip(client: httpx.Client) -> float:
    began = time.perf_counter()
    answer = client.get("/")
    elapsed = time.perf_counter() - began
    assert answer.status_code == 200 and len(answer.content) == 1024, answer.text
    return elapsed


def _ready(client: httpx.Client) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get("/").status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the HTTP server did not start")
        time.sleep(0.1)


def main(rounds: int, script: Path) -> None:
    url, key = anyio.run(LocalServer.address)
    sbx = Sandbox.create(api_key=key, api_url=url, sandbox_url=url)
    local = subprocess.Popen([sys.executable, str(script), str(PORT + 1)])
    try:
        sbx.files.write("serve.py", SERVE)
        handle = sbx.commands.run(f"python3 serve.py {PORT}", background=True)
        forwarded = httpx.Client(base_url=url, headers={"host": sbx.get_host(PORT)})
        direct = httpx.Client(base_url=f"http://127.0.0.1:{PORT + 1}")
        with forwarded, direct:
            _ready(forwarded)
            _ready(direct)
            trips: dict[str, list[float]] = {"forwarded": [], "direct": []}
            for _ in range(rounds):
                trips["forwarded"].append(_trip(forwarded))
                trips["direct"].append(_trip(direct))
        handle.kill()
        p50 = {kind: statistics.median(t) * 1000 for kind, t in trips.items()}
        p95 = {kind: statistics.quantiles(t, n=20)[-1] * 1000 for kind, t in trips.items()}
        for kind in trips:
            print(f"GET, {kind}: p50 {p50[kind]:.2f} ms, p95 {p95[kind]:.2f} ms")
        print(f"forwarded / direct: {p50['forwarded'] / p50['direct']:.2f}x (target at most 1.5x)")
    finally:
        local.kill()
        sbx.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as scratch:
        served = Path(scratch) / "serve.py"
        served.write_text(SERVE)
        main(rounds, served)
