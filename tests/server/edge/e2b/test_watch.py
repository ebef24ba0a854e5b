"""Watching directories (`files.watch_dir`) with the unmodified e2b SDK, sync and async."""

from __future__ import annotations

import asyncio
import time

import pytest
from e2b import AsyncSandbox, FilesystemEvent, FilesystemEventType, Sandbox, SandboxException

pytestmark = pytest.mark.usefixtures("e2b_env")

CREATE, WRITE, REMOVE = (
    FilesystemEventType.CREATE,
    FilesystemEventType.WRITE,
    FilesystemEventType.REMOVE,
)
RENAME, CHMOD = FilesystemEventType.RENAME, FilesystemEventType.CHMOD


def _seen(events: list[FilesystemEvent]) -> set[tuple[str, FilesystemEventType]]:
    return {(event.name, event.type) for event in events}


def test_a_recursive_watcher_polled_with_the_sync_sdk() -> None:
    sbx = Sandbox.create()
    try:
        sbx.files.make_dir("w/old")
        watcher = sbx.files.watch_dir("w", recursive=True)
        shallow = sbx.files.watch_dir("w")
        script = (
            "cd w && echo a > a.txt && chmod 600 a.txt && mv a.txt b.txt && "
            "mkdir new && echo c > new/c.txt && echo d > old/d.txt && rm b.txt"
        )
        sbx.commands.run(script)
        wanted = {
            ("a.txt", CREATE),
            ("a.txt", WRITE),
            ("a.txt", CHMOD),
            ("a.txt", RENAME),
            ("b.txt", CREATE),
            ("b.txt", REMOVE),
            ("new", CREATE),
            ("new/c.txt", CREATE),  # in a directory made after the watch began
            ("old/d.txt", CREATE),
        }
        events: list[FilesystemEvent] = []
        deadline = time.monotonic() + 30  # a safety net: they come, or the test has failed
        while not wanted <= _seen(events) and time.monotonic() < deadline:
            events += watcher.get_new_events()
        assert wanted <= _seen(events)
        assert watcher.get_new_events() == []  # taken once
        # without recursion, what happens below the directory is not seen
        names = {name for name, _ in _seen(shallow.get_new_events())}
        assert names >= {"a.txt", "b.txt", "new"} and not names & {"new/c.txt", "old/d.txt"}
        watcher.stop()
        with pytest.raises(SandboxException):
            watcher.get_new_events()  # removed: not found
        with pytest.raises(SandboxException, match="not a directory"):
            sbx.files.watch_dir("/etc/passwd")
        with pytest.raises(SandboxException, match="no such file"):
            sbx.files.watch_dir("/nowhere")
        with pytest.raises(SandboxException):
            sbx.files.watch_dir("/root")  # `user` may not read it
        assert sbx.files.watch_dir("/root", user="root").get_new_events() == []
    finally:
        sbx.kill()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_a_watch_streamed_with_the_async_sdk(anyio_backend: str) -> None:
    sbx = await AsyncSandbox.create()
    try:
        await sbx.files.make_dir("s")
        events: list[FilesystemEvent] = []
        came = asyncio.Event()

        def on_event(event: FilesystemEvent) -> None:
            events.append(event)
            came.set()

        handle = await sbx.files.watch_dir("s", on_event=on_event, recursive=True)
        await sbx.files.write("s/deep/x.txt", "x")
        await sbx.files.write("s/deep/x.txt", "again")
        async with asyncio.timeout(30):  # a safety net
            while ("deep/x.txt", WRITE) not in _seen(events):
                came.clear()
                await came.wait()
        assert {("deep", CREATE), ("deep/x.txt", CREATE)} <= _seen(events)
        await handle.stop()
    finally:
        await sbx.kill()
