"""The web UI in a real headless Chromium (Debian's ``chromium``), through Playwright.

Playwright drives the machine's browser (``executable_path``); nothing here
downloads one. Without a Chromium the tests skip — unless CI is set, where
they fail: CI installs it (.ci/run), and a missing browser must not pass as
green. ``COMPOSER_TEST_CHROMIUM`` names another binary.

``ui`` is the gateway beside the in-process stack (the ``live`` fixture of
tests/integration/api) and a fresh browser page; screenshots go to
tests/integration/ui/screenshots/ (or ``COMPOSER_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.integration.api.conftest import (  # noqa: F401 (gateway and live are fixtures)
    TOKENS,
    Gateway,
    Live,
    gateway,
    live,
)
from tests.integration.e2e.conftest import Stack

ARTIFACTS = Path(os.environ.get("COMPOSER_TEST_ARTIFACTS", Path(__file__).parent / "screenshots"))
#: Flags Chromium needs as root in a container, and no network of its own. Playwright
#: adds --headless and a fresh --user-data-dir (a temporary profile) to every launch.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    found = os.environ.get("COMPOSER_TEST_CHROMIUM") or next(
        (p for name in ("chromium", "chromium-browser") if (p := shutil.which(name))), None
    )
    if found:
        return found
    message = "no Chromium on this machine (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set, so this fails instead of skipping", pytrace=False)
    pytest.skip(message)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    executable = chromium_path()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class Ui:
    page: Page
    gateway: Gateway
    stack: Stack

    async def sign_in(self, role: str = "admin", path: str = "#/runs") -> None:
        """Open the UI, paste the role's token and wait for the navigation bar."""
        await self.open(path)
        await self.page.fill("#token", TOKENS[role])
        await self.page.click("#signin button[type=submit]")
        await self.page.locator("#role").wait_for()
        assert await self.page.text_content("#role") == role

    async def open(self, path: str = "") -> None:
        await self.page.goto(f"{self.gateway.url}/ui/{path}")

    async def screenshot(self, name: str, *, page: bool = False) -> Path:
        """The run graph (or the whole page) as a PNG; Playwright creates the folder."""
        path = ARTIFACTS / f"{name}.png"
        if page:
            await self.page.screenshot(path=str(path), full_page=True)
        else:
            await self.page.locator("#graph svg").screenshot(path=str(path))
        return path


@pytest.fixture
async def ui(live: Live, browser: Browser) -> AsyncIterator[Ui]:  # noqa: F811 (the fixture)
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield Ui(page, live.gateway, live.stack)
    finally:
        await context.close()
    assert not errors, f"the page raised: {errors}"
