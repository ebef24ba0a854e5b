"""Consoles left open: the API's latency beside them, and their memory over time (never run
as tests; loopback only).

    .venv/bin/python benchmarks/console_soak.py [--latency-consoles 20] [--rounds 2]
        [--consoles 1] [--duration 3600] [--warmup 300] [--every 30]

A server whose runs keep changing (one run after another of `CHANGING` sandboxes, each a
short sleep, so the runs page changes every two seconds) and real consoles: pages of the
distribution's Chromium, driven by Playwright, signed in on the runs page and following it
as a user's would.

1. The API's latency target (p99 of 50 clients polling a run of 10 sandboxes every 0.5 s,
   under 20 ms; p50 shown too) in three rounds, `--rounds` times in turn: with no console;
   with `--latency-consoles` streams of the runs page opened by a plain client, as consoles
   on other machines would cost the server; with as many Chromium consoles on this machine.
   Outside the last, the pages wait on `about:blank`, so the browser runs in each. The
   server's and the browser's shares of a core are shown: on a busy machine the p99 is
   noisy, the CPU less so.
2. With `--consoles` open for `--duration` seconds, every `--every` seconds: the server's
   resident memory, the browser's (what is private to the Chromium processes it started), and in each page, after a collection, the JS heap in use and the count of DOM
   nodes and event listeners. What is reported is the growth per hour of each after
   `--warmup` (a least-squares line through the samples), beside its first and last sample.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from playwright.sync_api import Browser, CDPSession, Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.console_bench import api_latency, fill, process_cpu
from benchmarks.server_bench import percentile
from tests.server.edge.console.browser import CHROMIUM, FLAGS, sign_in, visit
from tests.server.edge.console.conftest import console_url
from tests.servers import KEY, Server, start_server, wait_for

CHANGING = 10
"""Sandboxes in each run of the changing ones (one at a time, each sleeping `SLEEP` s): a
change every few seconds, and about 170 runs an hour in the store."""
SLEEP = 2
POLLERS, POLL_INTERVAL = 50, 0.5
"""The latency target's clients and how often each polls."""
PAGE_METRICS = ("JSHeapUsedSize", "Nodes", "JSEventListeners")


def keep_changing(server: Server, stop: threading.Event) -> None:
    """Start a run, wait for its end, start the next, until `stop`."""
    with server.client() as client:
        while not stop.is_set():
            run = client.swarms.start(
                f"sleep {SLEEP}", count=CHANGING, concurrency=1, size="1x1", name="changing"
            )
            wait_for(client, run["id"], timeout=600)


@contextmanager
def changing_runs(server: Server) -> Iterator[None]:
    """Runs that keep changing while the block runs."""
    stop = threading.Event()
    driver = threading.Thread(target=keep_changing, args=(server, stop), daemon=True)
    driver.start()
    try:
        yield
    finally:
        stop.set()
        driver.join(timeout=600)


@contextmanager
def chromium() -> Iterator[Browser]:
    """The distribution's Chromium."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def open_consoles(browser: Browser, console: str, count: int) -> list[Page]:
    """`count` consoles signed in on the runs page, each in a context of its own: a browser
    profile holds at most six connections to one server, and each console keeps one open."""
    pages = [browser.new_context().new_page() for _ in range(count)]
    for page in pages:
        sign_in(page, console, KEY)
    return pages


MODES = ("no console", "streams alone", "Chromium consoles")
"""Step 1's rounds: nothing but the pollers; as many streams as there are consoles, opened
by a plain client as the console's script opens them (what consoles on other machines cost
the server); the consoles themselves, in the browser on this machine."""


def latency(
    server: Server, console: str, run_id: str, polls: int, streams: int
) -> tuple[list[float], float, float]:
    """Seconds of each of the target's polls of `run_id` with `streams` plain streams
    following the runs page, and the server's and the browser's share of a core."""
    cpu, began = process_cpu(server.process.pid), time.perf_counter()
    browser = browser_cpu()
    # in a thread of its own: Playwright's loop holds this one
    with ThreadPoolExecutor(1) as pool:
        polling = (server.url, run_id, polls, console, "/fragments/runs", streams)
        latencies, _ = pool.submit(anyio.run, api_latency, *polling).result()
    took = time.perf_counter() - began
    return (
        latencies,
        (process_cpu(server.process.pid) - cpu) / took,
        (browser_cpu() - browser) / took,
    )


def latency_rounds(
    server: Server, pages: list[Page], console: str, run_id: str, rounds: int, polls: int
) -> None:
    """Step 1: the target's latency in each of `MODES`, in turn, `rounds` times."""
    print(f"1. API latency: {POLLERS} clients polling a run of 10 sandboxes every 0.5 s")
    p99s: dict[str, list[float]] = {mode: [] for mode in MODES}
    for mode in MODES * rounds:
        for page in pages:
            if mode == MODES[2]:
                visit(page, console, "/")
            else:
                page.goto("about:blank")
        streams = len(pages) if mode == MODES[1] else 0
        latencies, server_cpu, browser = latency(server, console, run_id, polls, streams)
        p99s[mode].append(percentile(latencies, 0.99))
        print(
            f"  {mode:<17} p50 {statistics.median(latencies) * 1000:6.1f} ms  "
            f"p99 {p99s[mode][-1] * 1000:6.1f} ms  CPU: server {server_cpu:.0%}, "
            f"browser {browser:.0%} of a core"
        )
    alone = statistics.median(p99s[MODES[0]])
    for mode in MODES[1:]:
        beside = statistics.median(p99s[mode])
        print(
            f"  median p99 with {len(pages)} {mode}: {beside * 1000:.1f} ms against "
            f"{alone * 1000:.1f} ms (ratio {beside / alone:.2f}); target p99 20 ms: "
            f"{'met' if beside < 0.020 else 'not met'}"
        )


def memory_kib(pid: int, *fields: str) -> int:
    """The sum of `fields` of a process's memory (its resident memory by default), in KiB."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        lines = [line.split() for line in rollup]
    return sum(int(line[1]) for line in lines if line[0].rstrip(":") in (fields or ("Rss",)))


def browser_pids() -> list[int]:
    """Every Chromium process below this one."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                name, _, rest = stat.read().partition("(")[2].rpartition(")")
            parents[int(entry)], names[int(entry)] = int(rest.split()[1]), name
        except OSError:  # ended meanwhile
            continue

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [pid for pid, name in names.items() if name.startswith("chrom") and ours(pid)]


def browser_private_kib() -> int:
    """Memory of the browser's processes that is theirs alone, in KiB: what they share with
    other programs (other browsers on the machine among them) moves with those programs."""
    private = ("Private_Clean", "Private_Dirty")
    return sum(_gone_as_zero(memory_kib, pid, *private) for pid in browser_pids())


def browser_cpu() -> float:
    """Seconds of CPU the browser's processes have used."""
    return sum(_gone_as_zero(process_cpu, pid) for pid in browser_pids())


def _gone_as_zero(measure: Callable[..., float], *args: Any) -> float:
    try:
        return measure(*args)
    except OSError:  # the process ended meanwhile
        return 0


def page_metrics(cdp: CDPSession) -> dict[str, float]:
    """The page's JS heap in use, DOM nodes and listeners, after a full collection."""
    cdp.send("HeapProfiler.collectGarbage")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {name: metrics[name] for name in PAGE_METRICS}


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares growth per hour of (seconds, value) samples."""
    times = [t for t, _ in samples]
    values = [v for _, v in samples]
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    spread = sum((t - mean_t) ** 2 for t in times)
    if not spread:
        return 0.0
    return 3600 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread


def soak(server: Server, pages: list[Page], duration: float, warmup: float, every: float) -> None:
    """Step 2: memory on both sides over `duration` seconds with `pages` open."""
    print(
        f"2. memory with {len(pages)} console(s) open for {duration:.0f} s (warm-up {warmup:.0f} s)"
    )
    sessions = [page.context.new_cdp_session(page) for page in pages]
    for cdp in sessions:
        cdp.send("Performance.enable")
    series: dict[str, list[tuple[float, float]]] = {}
    began = time.monotonic()
    while (now := time.monotonic() - began) <= duration:
        sample = {
            "server RSS KiB": memory_kib(server.process.pid),
            "browser private KiB": browser_private_kib(),
        }
        for i, cdp in enumerate(sessions):
            for name, value in page_metrics(cdp).items():
                sample[f"page {i} {name}"] = value
        for name, value in sample.items():
            series.setdefault(name, []).append((now, value))
        print(
            f"  {now:7.0f} s  " + "  ".join(f"{n} {v:.0f}" for n, v in sample.items()), flush=True
        )
        time.sleep(max(0.0, every - (time.monotonic() - began - now)))
    for name, samples in series.items():
        kept = [(t, v) for t, v in samples if t >= warmup] or samples
        first, last = kept[0][1], kept[-1][1]
        slope = slope_per_hour(kept)
        print(
            f"  {name:<28} {first:12.0f} -> {last:12.0f}  slope {slope:+12.0f}/h "
            f"({slope / statistics.fmean(v for _, v in kept):+.1%}/h, {len(kept)} samples)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=60, help="in the store at the start")
    parser.add_argument("--latency-consoles", type=int, default=20, help="0 skips step 1")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--polls", type=int, default=40, help="of each client, each round")
    parser.add_argument("--consoles", type=int, default=1, help="of step 2")
    parser.add_argument("--duration", type=float, default=3600, help="of step 2; 0 skips it")
    parser.add_argument("--warmup", type=float, default=300)
    parser.add_argument("--every", type=float, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        # at least a full first page of runs, so the runs page holds as many from the start
        _, polled = fill(state, args.runs, 10)
        server = start_server(state, "--memory-gib", "8")
        console = console_url(server)
        try:
            with changing_runs(server), chromium() as browser:
                if args.latency_consoles:
                    pages = open_consoles(browser, console, args.latency_consoles)
                    latency_rounds(server, pages, console, polled, args.rounds, args.polls)
                    for page in pages:
                        page.context.close()
                if args.duration:
                    pages = open_consoles(browser, console, args.consoles)
                    soak(server, pages, args.duration, args.warmup, args.every)
        finally:
            server.kill()


if __name__ == "__main__":
    main()
