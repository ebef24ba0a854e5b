"""The attack suite: what untrusted input, from outside or from inside a sandbox, must not do.

Each test plays an attacker against a real server on 127.0.0.1: with an API key from outside,
or from inside a sandbox with what every sandbox is given. An attack passes when it fails.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from ..server.engines.test_sandboxes import TINY
from ..servers import KEY, OTHER_KEY, Server, needs_namespaces, start_server, wait_for

pytestmark = needs_namespaces


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server for the module's attacks, with 8 GiB to book."""
    yield from served(tmp_path_factory, "attack", "--memory-gib", "8")


def served(factory: pytest.TempPathFactory, name: str, *options: str) -> Iterator[Server]:
    """A module's server with `options`, stopped once its attacks are done."""
    handle = start_server(factory.mktemp(name) / "state", *options)
    yield handle
    handle.kill(signal.SIGTERM)


def in_sandbox(server: Server, script: str, key: str = KEY) -> dict[str, object]:
    """Run a shell `script` in one small sandbox; the sandbox's record once it has ended."""
    with server.client(key) as client:
        run = client.swarms.start(script, count=1, size=TINY)
        (sandbox,) = wait_for(client, run["id"])["sandboxes"]
    return dict(sandbox)


def posted_from_inside(path: str, body: dict[str, object]) -> str:
    """A shell script that POSTs `body` to the server's `path` from inside a sandbox, with the
    sandbox's own key, and prints the status (or the status and the error's code)."""
    return f"""
python3 - <<'EOF'
import json, os, urllib.request, urllib.error
request = urllib.request.Request(
    os.environ["MARITIME_API_URL"] + {path!r},
    data=json.dumps({body!r}).encode(),
    headers={{"Authorization": "Bearer " + os.environ["MARITIME_API_KEY"],
             "Content-Type": "application/json"}},
)
try:
    print(urllib.request.urlopen(request).status)
except urllib.error.HTTPError as ex:
    print(ex.code, json.loads(ex.read())["code"])
EOF
"""


__all__ = ["KEY", "OTHER_KEY", "Server", "in_sandbox", "posted_from_inside"]
