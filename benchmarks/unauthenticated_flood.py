"""Authenticated requests while unauthenticated connections trickle bodies, and what each
refusal costs the server (figures and ratios within one run; never run as a test).

    .venv/bin/python benchmarks/unauthenticated_flood.py [--connections 4000] [--seconds 30]

One server on loopback. First, what the server's own CPU pays (its CPU seconds, from
/proc, which do not depend on how loaded the machine is) for 1,000 connections of each kind,
opened one after another by 8 threads: a request with the server's key on a new connection
(the baseline), a request with no key and one with a made-up key (refused), and a
connection past the per-address cap (reset). Then a client with the key asks `GET /api/swarms` every 20 ms on one keep-alive
connection (reconnecting if it is closed): first alone (the baseline), then while an attacker
process (at the lowest priority, `nice 19`: it stands for many machines, and must not take
the CPU the server would have) holds `--connections` connections with no key, sandbox id or
token,
each sending a request head that declares a 100,000-byte body (`POST /filesystem.Filesystem/
Stat`, `POST /files?path=/x`, or a chunked `POST /api/swarms`) and then one byte of it every
10 s, and reconnecting 10 s after the server closes it (so at most `--connections` every 10 s:
the attack is bounded). The attacker spreads its connections over 16 loopback addresses
(127.0.0.2-17), each below the per-address cap, so that the cap alone does not turn it away.
Reported: the CPU each kind of connection costs and its ratio to the baseline; the
authenticated requests' p50 and p99 in each phase, their 503s and errors; the attack's
connections made and answered; the CPU the server and the attacker used meanwhile; and the
load average (the machine may be shared).

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import KEY, start_server

from inspect_swarm.server._defaults import SERVER_DEFAULTS

ADDRESSES = [f"127.0.0.{i}" for i in range(2, 18)]
CAPPED = "127.0.0.18"
"""The address that holds as many connections as one may, for the cost of one past it."""
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
    byte = opening(head)[len(head) :]
    await asyncio.sleep(index * TRICKLE_SECONDS / counts["connections"])  # spread the starts
    while True:
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((source(index), 0))
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


def cpu_seconds(pid: int) -> float:
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
        os.nice(19)
        counts = asyncio.run(attack(args.attacker, args.connections, args.seconds))
        print(json.dumps(counts))
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "state", "--memory-gib", "4")
        try:
            print(f"load average: {os.getloadavg()[0]:.1f} (2 cores: {os.cpu_count()})")
            costs(server.url, server.process.pid)
            baseline = report("alone", poll(server.url, args.seconds))
            flood = subprocess.Popen(
                [sys.executable, __file__, "--attacker", server.url, *sys.argv[1:]],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(TRICKLE_SECONDS)  # every attacking connection has begun
            pids = (server.process.pid, flood.pid)
            used = [cpu_seconds(pid) for pid in pids]
            attacked = report(
                f"while {args.connections} connections trickle bodies",
                poll(server.url, args.seconds - TRICKLE_SECONDS),
            )
            spent = [cpu_seconds(pid) - was for pid, was in zip(pids, used, strict=True)]
            out, _ = flood.communicate(timeout=120)
            print(f"the attack: {out.strip()}")
            span = args.seconds - TRICKLE_SECONDS
            print(
                f"CPU meanwhile: the server {spent[0]:.1f} s, the attacker {spent[1]:.1f} s "
                f"in {span:g} s; load average {os.getloadavg()[0]:.1f}"
            )
            print(f"p99 under attack / alone: {attacked / baseline:.2f}x (target: under 50 ms)")
        finally:
            server.kill()


def costs(url: str, pid: int, count: int = 2000) -> None:
    """The server's CPU for `count` connections of each kind, per 1,000, and the ratio of
    each to a request with its key."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    address = (parts.hostname, parts.port)
    keyed = (
        f"GET /api/swarms HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    baseline = cpu_per_thousand(pid, count, lambda i: exchange(address, keyed, source(i)))
    print(f"a request with the key, on a new connection: {baseline:.0f} ms of CPU per 1,000")
    refused = cpu_per_thousand(
        pid, count, lambda i: exchange(address, opening(HEADS[i % len(HEADS)]), source(i))
    )
    print(
        f"a request with no key, refused: {refused:.0f} ms per 1,000 "
        f"({refused / baseline:.2f}x the baseline)"
    )
    made_up = keyed.replace(KEY.encode(), b"made-up")
    unknown = cpu_per_thousand(pid, count, lambda i: exchange(address, made_up, source(i)))
    print(
        f"a request with a made-up key, refused: {unknown:.0f} ms per 1,000 "
        f"({unknown / baseline:.2f}x the baseline)"
    )
    held = [
        socket.create_connection(address, source_address=(CAPPED, 0))
        for _ in range(SERVER_DEFAULTS.max_client_connections)
    ]
    try:
        healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        reset = cpu_per_thousand(pid, count, lambda _: exchange(address, healthz, CAPPED))
    finally:
        for sock in held:
            sock.close()
    print(
        f"a connection past the per-address cap, reset: {reset:.0f} ms per 1,000 "
        f"({reset / baseline:.2f}x the baseline)"
    )


def cpu_per_thousand(pid: int, count: int, open_one: Callable[[int], None]) -> float:
    """The server's CPU, in ms, per 1,000 calls of `open_one` (8 at a time)."""
    before = cpu_seconds(pid)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(open_one, range(count)))
    return (cpu_seconds(pid) - before) / count * 1e6


def source(index: int) -> str:
    """The address the attack's connection `index` comes from."""
    return ADDRESSES[index % len(ADDRESSES)]


def opening(head: bytes) -> bytes:
    """A head of `HEADS` and the first byte of its body."""
    return head + (b"1\r\nx\r\n" if b"chunked" in head else b"x")


def exchange(address: tuple[str, int], data: bytes, source: str) -> None:
    """One connection from `source`: `data` sent, then everything read until it closes."""
    with socket.create_connection(address, timeout=30, source_address=(source, 0)) as sock:
        try:
            sock.sendall(data)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # reset: one past the cap


if __name__ == "__main__":
    main()
