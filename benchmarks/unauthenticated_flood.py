"""Authenticated requests while unauthenticated connections trickle bodies (a figure and a
ratio within one run; never run as a test).

    .venv/bin/python benchmarks/unauthenticated_flood.py [--connections 4000] [--seconds 30]

One server on loopback. A client with the server's key asks `GET /api/swarms` every 20 ms on
one keep-alive connection (reconnecting if it is closed): first alone (the baseline), then
while an attacker process holds `--connections` connections with no key, sandbox id or token,
each sending a request head that declares a 100,000-byte body (`POST /filesystem.Filesystem/
Stat`, `POST /files?path=/x`, or a chunked `POST /api/swarms`) and then one byte of it every
10 s, and reconnecting 10 s after the server closes it (so at most `--connections` every 10 s:
the attack is bounded). The attacker spreads its connections over 16 loopback addresses
(127.0.0.2-17), each below the per-address cap, so that the cap alone does not turn it away.
Reported: the authenticated requests' p50 and p99 in each phase, their 503s and errors, and
the attack's connections made and answered.

Target: p99 under 50 ms and no 503 during the attack. Everything stays on 127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import KEY, start_server

ADDRESSES = [f"127.0.0.{i}" for i in range(2, 18)]
TRICKLE_SECONDS = 10.0
HEADS = [
    b"POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
    b"\r\nContent-Length: 100000\r\n\r\n",
    b"POST /files?path=/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
    b"POST /api/swarms HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def attacker(host: str, port: int, index: int, counts: dict[str, int]) -> None:
    """One of the attack's connections, again and again until cancelled."""
    head = HEADS[index % len(HEADS)]
    byte = b"1\r\nx\r\n" if b"chunked" in head else b"x"
    await asyncio.sleep(index * TRICKLE_SECONDS / counts["connections"])  # spread the starts
    while True:
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((ADDRESSES[index % len(ADDRESSES)], 0))
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
            reader, writer = await asyncio.open_connection(sock=sock)
            counts["made"] += 1
            writer.write(head)
            while True:
                writer.write(byte)
                await writer.drain()
                try:
                    async with asyncio.timeout(TRICKLE_SECONDS):
                        if await reader.read(65536):
                            counts["answered"] += 1
                            await reader.read()  # until the server closes it
                            break
                        break  # closed without an answer
                except TimeoutError:
                    continue  # not answered: trickle on
            writer.close()
        except OSError:
            counts["refused"] += 1
            sock.close()
        await asyncio.sleep(TRICKLE_SECONDS)


async def attack(url: str, connections: int, seconds: float) -> dict[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    counts = {"connections": connections, "made": 0, "answered": 0, "refused": 0}
    tasks = [
        asyncio.create_task(attacker(parts.hostname, parts.port, i, counts))
        for i in range(connections)
    ]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return counts


def poll(url: str, seconds: float) -> dict[str, object]:
    """`GET /api/swarms` every 20 ms for `seconds`: latencies (ms), 503s and errors."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    request = (
        f"GET /api/swarms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    ).encode()
    latencies: list[float] = []
    unavailable = errors = 0
    sock: socket.socket | None = None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            if sock is None:
                sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
            sock.sendall(request)
            answer = _read_answer(sock)
            latencies.append((time.perf_counter() - started) * 1000)
            if answer.startswith(b"HTTP/1.1 503"):
                unavailable += 1
        except OSError:
            errors += 1
            if sock is not None:
                sock.close()
            sock = None
        time.sleep(0.02)
    if sock is not None:
        sock.close()
    return {"latencies": latencies, "503": unavailable, "errors": errors}


def _read_answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        if not part:
            raise ConnectionResetError("closed")
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        part = sock.recv(65536)
        if not part:
            raise ConnectionResetError("closed")
        body += part
    return head


def server_cpu(pid: int) -> float:
    """The CPU seconds a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(name: str, polled: dict[str, object]) -> float:
    latencies = polled["latencies"]
    assert isinstance(latencies, list)
    if not latencies:
        print(f"{name}: no request answered, {polled['errors']} errors (timeouts: 10 s)")
        return float("inf")
    p99 = percentile(latencies, 0.99)
    print(
        f"{name}: {len(latencies)} requests, p50 {statistics.median(latencies):.1f} ms, "
        f"p99 {p99:.1f} ms, {polled['503']} answered 503, {polled['errors']} errors"
    )
    return p99


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--attacker", help=argparse.SUPPRESS)  # the attack's own process
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.attacker:
        counts = asyncio.run(attack(args.attacker, args.connections, args.seconds))
        print(json.dumps(counts))
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "state", "--memory-gib", "4")
        try:
            baseline = report("alone", poll(server.url, args.seconds))
            flood = subprocess.Popen(
                [sys.executable, __file__, "--attacker", server.url, *sys.argv[1:]],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(TRICKLE_SECONDS)  # every attacking connection has begun
            used = server_cpu(server.process.pid)
            attacked = report(
                f"while {args.connections} connections trickle bodies",
                poll(server.url, args.seconds - TRICKLE_SECONDS),
            )
            used = server_cpu(server.process.pid) - used
            out, _ = flood.communicate(timeout=120)
            print(f"the attack: {out.strip()}")
            made = json.loads(out)["made"] * (args.seconds - TRICKLE_SECONDS) / args.seconds
            print(
                f"the server's CPU meanwhile: {used:.1f} s in {args.seconds - TRICKLE_SECONDS:g} s"
                f", about {used / max(made, 1) * 1000:.2f} ms per attacking connection"
            )
            print(f"p99 under attack / alone: {attacked / baseline:.2f}x (target: under 50 ms)")
        finally:
            server.kill()


if __name__ == "__main__":
    main()
