"""The console in a real browser (Debian's Chromium through Playwright): signing in, a run
finishing live, the failed sandboxes filtered, a run cancelled, a phone's width."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from ....servers import KEY, Server, needs_namespaces, wait_for
from ...engines.test_sandboxes import TINY
from .browser import browser, needs_chromium, page, sign_in

pytestmark = [needs_namespaces, needs_chromium]
__all__ = ["browser", "page"]  # fixtures


def test_signing_in_keeps_the_key_in_the_tab_alone(page: Page, console: str) -> None:
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    sign_in(page, console, KEY)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 1
    assert page.evaluate("document.cookie") == ""
    assert not any(KEY in url for url in requests)
    page.reload()  # the tab keeps it
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#sign-in")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0


def test_a_wrong_key_is_refused_on_the_sign_in_form(page: Page, console: str) -> None:
    page.goto(console)
    page.fill("#key", "not-a-key")
    page.press("#key", "Enter")
    expect(page.locator("#sign-in-error")).to_have_text("unknown API key")


def test_a_run_finishes_live_without_a_reload(page: Page, server: Server, console: str) -> None:
    with server.client() as client:
        run = client.swarms.start(
            "sleep 0.3", count=6, concurrency=1, size=TINY, name="steady", timeout_seconds=60
        )
        sign_in(page, console, KEY, f"/runs/{run['id']}")
        page.evaluate("window.stayed = true")
        download = page.get_by_role("button", name="Download results.jsonl")
        download.focus()
        cdp = page.context.new_cdp_session(page)
        before = _dom_counters(cdp)
        expect(page.locator("h1 .status")).to_have_text("completed", timeout=60_000)
        wait_for(client, run["id"])
    expect(page.locator(".counts")).to_contain_text("6 succeeded")
    expect(download).to_be_focused()  # the keyboard's place survives each update
    assert page.evaluate("window.stayed") is True  # the same document, updated in place
    after = _dom_counters(cdp)
    assert after["jsEventListeners"] == before["jsEventListeners"]
    assert after["nodes"] < 2 * before["nodes"]


def _dom_counters(cdp: Any) -> dict[str, int]:
    cdp.send("HeapProfiler.collectGarbage")
    return dict(cdp.send("Memory.getDOMCounters"))


def test_the_failed_sandboxes_are_first_and_filtered(
    page: Page, server: Server, console: str
) -> None:
    with server.client() as client:
        run = client.swarms.start(
            'test "$MARITIME_SWARM_INDEX" != 2', count=4, size=TINY, name="one fails"
        )
        wait_for(client, run["id"])
    sign_in(page, console, KEY, f"/runs/{run['id']}")
    rows = page.locator("table.sandboxes tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.first.locator(".status")).to_have_text("failed")
    page.get_by_label("Sandboxes", exact=True).select_option("failed")
    expect(rows).to_have_count(1)
    assert page.url.endswith("?status=failed")
    expect(rows.first.locator("td").first).to_have_text("2")


def test_a_run_is_cancelled_from_its_page(page: Page, server: Server, console: str) -> None:
    with server.client() as client:
        run = client.swarms.start("sleep 60", count=2, size=TINY, name="to cancel")
        sign_in(page, console, KEY, f"/runs/{run['id']}")
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel run").click()
        expect(page.locator("#notice")).to_have_text(f"run {run['id']} cancelled")
        expect(page.locator("h1 .status")).to_have_text("completed", timeout=60_000)
        expect(page.locator(".counts")).to_contain_text("2 cancelled")
        assert wait_for(client, run["id"])["status"] == "completed"


def test_a_phone_reads_the_runs_without_scrolling_sideways(
    page: Page, server: Server, console: str
) -> None:
    with server.client() as client:  # a run of its own to show, whichever tests ran before
        wait_for(client, client.swarms.start("true", count=1, size=TINY, name="on a phone")["id"])
    page.set_viewport_size({"width": 390, "height": 800})
    sign_in(page, console, KEY)
    # a safety net: a loaded machine has taken over the default 5 s to show the row
    expect(page.locator("table.runs tbody tr").first).to_be_visible(timeout=20_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_the_keyboard_reaches_a_run_from_the_list(page: Page, server: Server, console: str) -> None:
    with server.client() as client:
        run = client.swarms.start("true", count=1, size=TINY, name="by keyboard")
        wait_for(client, run["id"])
    sign_in(page, console, KEY, "/?q=by+keyboard")
    link = page.get_by_role("link", name="by keyboard")
    for _ in range(30):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "by keyboard":
            break
    expect(link).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{console}/runs/{run['id']}")
