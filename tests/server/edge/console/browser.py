"""Debian's Chromium, driven by Playwright (which downloads no browser of its own here), for
the console's tests and the guide's screenshots."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="the console's browser tests need /usr/bin/chromium"
)


@contextmanager
def chromium(**options: Any) -> Iterator[BrowserContext]:
    """A fresh Chromium profile (`options`: Playwright's, such as viewport or color_scheme)."""
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=FLAGS, **options
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    """One Chromium for the module's tests."""
    with chromium() as context:
        yield context


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    """A new tab of it."""
    page = browser.new_page()
    yield page
    page.close()


def sign_in(page: Page, console: str, key: str, path: str = "/") -> None:
    """Open `path` of the console and sign in with `key`; returns once its content shows."""
    page.goto(console + path)
    page.fill("#key", key)
    page.press("#key", "Enter")
    expect(page.locator("#view")).to_have_attribute("aria-busy", "false", timeout=20_000)


def visit(page: Page, console: str, path: str) -> None:
    """Open `path` of the console in a tab signed in already; returns once its content shows."""
    page.goto(console + path)
    expect(page.locator("#view")).to_have_attribute("aria-busy", "false", timeout=20_000)
