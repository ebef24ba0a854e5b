"""Photograph each page of the web console for docs/console.md, from a real server.

    bash scripts/setup && .venv/bin/python scripts/console_screenshots.py

Starts a server on 127.0.0.1 with a state directory of its own, starts a few runs (one
with failures, one still going) and a long-lived sandbox, signs in to the console in
Debian's Chromium and writes docs/images/console-*.png. Not run by the tests.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, expect  # noqa: E402
from tests.server.edge.console.browser import chromium, sign_in, visit  # noqa: E402
from tests.servers import KEY, start_server, wait_for  # noqa: E402

IMAGES = ROOT / "docs" / "images"
TINY = "1x1"


def shoot(page: Page, name: str) -> None:
    """Write the tab as it is to docs/images/NAME.png."""
    page.wait_for_timeout(600)  # the ages tick once
    page.screenshot(path=str(IMAGES / f"{name}.png"), full_page=False)
    print(f"docs/images/{name}.png")


def main() -> None:
    """Make a server with something on each page, and photograph each page."""
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        server = start_server(state, "--memory-gib", "8")
        console = json.loads((Path(tmp) / "state.ready").read_text())["consoleUrl"]
        try:
            with server.client() as client:
                done = client.swarms.start("echo ok", count=8, size=TINY, name="smoke test")
                mixed = client.swarms.start(
                    'echo "case $MARITIME_SWARM_INDEX"; '
                    'if [ $((MARITIME_SWARM_INDEX % 4)) = 3 ]; then '
                    'echo "assertion failed: expected 42" >&2; exit 1; fi',
                    count=12,
                    size=TINY,
                    name="eval cases",
                )
                wait_for(client, done["id"])
                wait_for(client, mixed["id"])
                client.swarms.start(
                    "sleep $((MARITIME_SWARM_INDEX * 2))",
                    count=40,
                    concurrency=4,
                    size=TINY,
                    name="seeds sweep",
                )
                box = client.sandboxes.create(size=TINY, metadata={"agent": "planner"})
                with chromium(viewport={"width": 1280, "height": 800}) as browser:
                    page = browser.pages[0]
                    page.goto(console)
                    shoot(page, "console-sign-in")
                    sign_in(page, console, KEY)
                    expect(page.locator("table.runs tbody tr")).to_have_count(3)
                    shoot(page, "console-runs")
                    visit(page, console, f"/runs/{mixed['id']}")
                    page.locator("details summary").first.click()
                    shoot(page, "console-run")
                    visit(page, console, "/sandboxes")
                    shoot(page, "console-sandboxes")
                    visit(page, console, "/lease")
                    shoot(page, "console-lease")
                with chromium(
                    viewport={"width": 390, "height": 800}, color_scheme="dark"
                ) as phone:
                    page = phone.pages[0]
                    sign_in(page, console, KEY)
                    shoot(page, "console-phone-dark")
                client.sandboxes.kill(box["sandboxId"])
        finally:
            server.kill()


if __name__ == "__main__":
    main()
