"""Pause and resume with the unmodified e2b SDK: a paused sandbox's processes are frozen
(cgroup freezer) with their memory kept, and `connect` resumes it."""

from __future__ import annotations

import time

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    InvalidArgumentException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
)

from ....servers import KEY, Server

pytestmark = pytest.mark.usefixtures("e2b_env")

# each pass records the longest wait between two of its passes, kept in its own memory
_GAPS = """
import os, time
last, gap = time.monotonic(), 0.0
while True:
    now = time.monotonic()
    gap, last = max(gap, now - last), now
    with open("/tmp/gap.new", "w") as f:
        f.write(f"{os.getpid()} {gap}")
    os.replace("/tmp/gap.new", "/tmp/gap")
    time.sleep(0.01)
"""
PAUSED_SECONDS = 1.0


def _gap(sbx: Sandbox) -> tuple[str, float]:
    """The process's pid and longest gap so far (a gap below 0 before its first pass)."""
    if not sbx.files.exists("/tmp/gap"):
        return "", -1.0
    pid, gap = sbx.files.read("/tmp/gap").split()
    return pid, float(gap)


def _gap_reaches(sbx: Sandbox, least: float) -> tuple[str, float]:
    """The gap file once it shows a gap of `least` seconds (a safety net of 60 s)."""
    deadline = time.monotonic() + 60
    while (found := _gap(sbx))[1] < least and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def _states(sandbox_id: str, *states: SandboxState) -> list[str]:
    paginator = Sandbox.list(query=SandboxQuery(state=list(states)))
    return [s.sandbox_id for s in paginator.next_items() if s.sandbox_id == sandbox_id]


def test_a_paused_sandbox_keeps_its_processes_and_memory_and_connect_resumes_it() -> None:
    sbx = Sandbox.create()
    try:
        sbx.files.write("/tmp/gaps.py", _GAPS)
        sbx.commands.run("python3 /tmp/gaps.py", background=True)
        pid, _ = _gap_reaches(sbx, 0.0)
        assert sbx.pause() is True
        assert sbx.pause() is False  # paused already
        assert _states(sbx.sandbox_id, SandboxState.PAUSED) == [sbx.sandbox_id]
        assert _states(sbx.sandbox_id, SandboxState.RUNNING) == []
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        # its daemon takes no call while its processes are frozen
        with pytest.raises(SandboxException):
            sbx.commands.run("true")
        time.sleep(PAUSED_SECONDS)  # the frozen process sees this as one long wait
        again = Sandbox.connect(sbx.sandbox_id, timeout=120)
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
        # the same process, its memory (the longest gap so far) kept across the pause
        assert _gap_reaches(again, PAUSED_SECONDS)[0] == pid
        assert again.commands.run("echo back").stdout == "back\n"
    finally:
        sbx.kill()
    assert all(s.sandbox_id != sbx.sandbox_id for s in Sandbox.list().next_items())


def test_a_paused_sandboxs_timeout_does_not_run_and_a_resume_sets_it_anew(
    server: Server,
) -> None:
    sbx = Sandbox.create(timeout=4)
    try:
        sbx.pause()
        time.sleep(5)  # past its timeout: a paused sandbox is kept until resumed or killed
        headers = {"X-API-KEY": KEY}
        answer = httpx.post(
            f"{server.url}/sandboxes/{sbx.sandbox_id}/resume", json={"timeout": 60}, headers=headers
        )
        assert answer.status_code == 201, answer.text
        assert answer.json()["sandboxID"] == sbx.sandbox_id
        info = Sandbox.get_info(sbx.sandbox_id)
        assert info.state == SandboxState.RUNNING
        assert 30 < info.end_at.timestamp() - time.time() <= 60
        # a running sandbox is not resumed, nor given a timeout while paused
        again = httpx.post(f"{server.url}/sandboxes/{sbx.sandbox_id}/resume", headers=headers)
        assert again.status_code == 409 and "not paused" in again.json()["message"]
        sbx.pause()
        with pytest.raises(SandboxException, match="paused"):
            sbx.set_timeout(30)
    finally:
        sbx.kill()  # a paused sandbox is killed as a running one is
    assert all(s.sandbox_id != sbx.sandbox_id for s in Sandbox.list().next_items())


def test_a_pause_or_resume_without_memory_is_refused() -> None:
    sbx = Sandbox.create()
    try:
        with pytest.raises((SandboxException, InvalidArgumentException), match="memory"):
            sbx.pause(mode="filesystem")
        sbx.pause()
        with pytest.raises((SandboxException, InvalidArgumentException), match="memory"):
            Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
    finally:
        sbx.kill()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # e2b's async SDK is asyncio-only
async def test_pause_and_connect_with_the_async_sdk(anyio_backend: str) -> None:
    sbx = await AsyncSandbox.create()
    try:
        await sbx.files.write("/tmp/kept", "state")
        assert await sbx.pause() is True
        assert (await AsyncSandbox.get_info(sbx.sandbox_id)).state == SandboxState.PAUSED
        again = await AsyncSandbox.connect(sbx.sandbox_id)
        assert (await again.commands.run("cat /tmp/kept")).stdout == "state"
    finally:
        await sbx.kill()


def test_a_timeout_pauses_a_sandbox_created_with_on_timeout_pause() -> None:
    sbx = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    try:
        sbx.files.write("/tmp/kept", "state")
        deadline = time.monotonic() + 60  # a safety net: its timeout is 2 s
        while (info := Sandbox.get_info(sbx.sandbox_id)).state != SandboxState.PAUSED:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert again.files.read("/tmp/kept") == "state"
        assert info.end_at.timestamp() < Sandbox.get_info(sbx.sandbox_id).end_at.timestamp()
    finally:
        sbx.kill()


def test_a_timeout_kills_a_sandbox_created_with_on_timeout_kill() -> None:
    sbx = Sandbox.create(timeout=1, lifecycle={"on_timeout": "kill"})
    deadline = time.monotonic() + 60
    while any(s.sandbox_id == sbx.sandbox_id for s in Sandbox.list().next_items()):
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.parametrize(
    "lifecycle",
    [
        {"on_timeout": {"action": "pause", "mode": "filesystem"}},
        {"on_timeout": "pause", "auto_resume": True},
    ],
)
def test_a_lifecycle_this_server_does_not_offer_is_refused(lifecycle: object) -> None:
    with pytest.raises(SandboxException, match=r"autoPauseMemory|autoResume"):
        Sandbox.create(lifecycle=lifecycle)  # type: ignore[arg-type]
