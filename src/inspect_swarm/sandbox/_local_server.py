"""The swarm server the `swarm_server` sandbox starts on this machine when none is configured."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

_SERVER_START_SECONDS = 60
_PR_SET_PDEATHSIG = 1


class LocalServer:
    """The swarm server this process starts when no server is configured.

    Started from the event loop's thread and told to die with it (PR_SET_PDEATHSIG follows
    the forking thread), so it, and every sandbox on it, ends with the eval even after a
    crash; it is reused by later tasks of the process and stopped at exit.
    """

    process: subprocess.Popen[bytes] | None = None
    url: str | None = None
    api_key: str | None = None

    @classmethod
    async def address(cls) -> tuple[str, str]:
        """The server's URL and key, once it answers (started if it is not running)."""
        if cls.process is not None and cls.process.poll() is None and cls.url and cls.api_key:
            return cls.url, cls.api_key
        state = Path(tempfile.mkdtemp(prefix="inspect-swarm-server-"))
        ready = state / "ready.json"
        # the server makes its key and gives it in the ready file (0600): a key on the
        # command line would be in /proc/<pid>/cmdline for every user of the machine
        command = [sys.executable, "-m", "inspect_swarm.cli", "server", "--port", "0"]
        command += ["--ready-file", str(ready), "--state-dir", str(state / "state")]
        with (state / "server.log").open("wb") as log:
            # forked from the loop's thread on purpose: the server dies with that thread
            process = subprocess.Popen(  # noqa: ASYNC220
                command, stdout=log, stderr=log, preexec_fn=_die_with_parent
            )
        cls.process, cls.url, cls.api_key = process, None, None
        atexit.register(_stop_server, process, state)
        with anyio.move_on_after(_SERVER_START_SECONDS):
            while process.poll() is None:
                if ready.exists() and (text := ready.read_text()):
                    found = json.loads(text)
                    cls.url, cls.api_key = found["url"], found["apiKey"]
                    return found["url"], found["apiKey"]
                await anyio.sleep(0.05)
        process.kill()
        raise RuntimeError(f"The local swarm server did not start; see {state / 'server.log'}")


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _stop_server(process: subprocess.Popen[bytes], state: Path) -> None:
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    shutil.rmtree(state, ignore_errors=True)
