"""Attacks on the web console: markup and script in what a run records (its name, a
sandbox's output and error), another account's run opened by its address, and changes asked
for without the key's header. Each value must show as text, run nothing, and reveal nothing
the key could not read through the API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.client import HTTPConnection
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect

from ..server.edge.console.browser import browser, needs_chromium, page, sign_in
from ..server.edge.console.conftest import console_url
from ..server.engines.test_sandboxes import TINY
from ..servers import KEY, OTHER_KEY, Server, wait_for

NAME = '<img src=x onerror="window.pwned=1">run'
STDOUT = "<script>window.pwned=2</script>"
STDERR = '<img src=x onerror="window.pwned=3">'
__all__ = ["browser", "page"]  # fixtures
RESULT_PATH = "/tmp/<svg onload=window.pwned=4>"
"""Never written: the sandbox's error names it."""


@pytest.fixture(scope="module")
def console(server: Server) -> str:
    return console_url(server)


@pytest.fixture(scope="module")
def hostile(server: Server) -> Iterator[dict[str, object]]:
    """A finished run of one sandbox whose name, output and error hold markup and script."""
    with server.client() as client:
        run = client.swarms.start(
            f"echo '{STDOUT}'; echo '{STDERR}' >&2",
            count=1,
            size=TINY,
            name=NAME,
            result_path=RESULT_PATH,
        )
        yield wait_for(client, run["id"])


def test_a_run_s_values_are_escaped_in_every_fragment(
    console: str, hostile: dict[str, object]
) -> None:
    (sandbox,) = hostile["sandboxes"]  # type: ignore[misc]
    assert RESULT_PATH in sandbox["error"]
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=console, headers=headers, timeout=30) as client:
        pages = [
            client.get("/fragments/runs").text,
            client.get(f"/fragments/runs/{hostile['id']}").text,
            client.get(f"/fragments/sandboxes/{sandbox['sandboxId']}").text,
        ]
    for text in pages:
        assert "<img" not in text and "<script" not in text and "<svg" not in text
    assert "&lt;script&gt;window.pwned=2&lt;/script&gt;" in pages[2]


@needs_chromium
def test_markup_in_a_run_shows_as_text_and_runs_nothing(
    page: Page, console: str, hostile: dict[str, object]
) -> None:
    (sandbox,) = hostile["sandboxes"]  # type: ignore[misc]
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, console, KEY)
    expect(page.get_by_role("link", name=NAME)).to_be_visible()
    page.get_by_role("link", name=NAME).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(NAME)
    page.locator("details summary").first.click()
    expect(page.locator("#view")).to_contain_text(STDOUT)
    page.goto(f"{console}/sandboxes/{sandbox['sandboxId']}")
    expect(page.locator("#view")).to_contain_text(STDERR)
    expect(page.locator("#view")).to_contain_text(RESULT_PATH)
    assert page.evaluate("window.pwned") is None
    assert page.locator("#view img, #view script, #view svg").count() == 0
    assert not errors


@needs_chromium
def test_another_account_s_run_by_its_address_shows_nothing_of_it(
    page: Page, console: str, hostile: dict[str, object]
) -> None:
    sign_in(page, console, OTHER_KEY, f"/runs/{hostile['id']}")
    expect(page.locator("#notice")).to_contain_text("no swarm run")
    assert NAME not in page.content() and "pwned" not in page.content()
    page.goto(f"{console}/")
    expect(page.locator("#view")).to_contain_text("No runs yet.")
    assert NAME not in page.content()


def test_no_change_without_the_key_s_header(
    server: Server, console: str, hostile: dict[str, object]
) -> None:
    with server.client() as client:
        run = client.swarms.start("sleep 30", count=1, size=TINY)
        try:
            with httpx.Client(base_url=console, timeout=30) as browser:
                # what a cross-site form could send: no header, the key as a cookie or field
                browser.cookies.set("key", KEY)
                for path in (
                    f"/actions/runs/{run['id']}/cancel",
                    "/actions/lease/release",
                ):
                    assert browser.post(path, data={"key": KEY}).status_code == 401
            assert client.swarms.get(run["id"])["status"] != "completed"
        finally:
            client.swarms.cancel(run["id"])


def test_the_console_keeps_the_api_s_limits(console: str) -> None:
    """A body over the API's limit is refused before it is read, as the API refuses it."""
    address = urlsplit(console)
    connection = HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        connection.putrequest("POST", "/actions/lease/release")
        connection.putheader("Authorization", f"Bearer {KEY}")
        connection.putheader("Content-Length", str(64 * 1024**2))
        connection.endheaders()
        refused = connection.getresponse()
        assert refused.status == 413
        assert json.loads(refused.read())["code"] == "body_too_large"
    finally:
        connection.close()
