"""The browser report tests render report.html in: Debian's `chromium`, driven through
Playwright's Python API (never `playwright install`: no browser is downloaded).

On a developer machine without chromium the tests that need it are skipped with a message;
under CI (`make test` installs Debian's chromium as root first) a missing browser fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO

# Screenshots a test takes are kept here (build/ is ignored by git), for people to look at.
ARTIFACTS = REPO / "build" / "test-artifacts"


def chromium_binary() -> str:
    """The browser, or a skip on a developer machine without one. Under CI a missing
    browser is a failure, never a skip."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary:
        return binary
    if "CI" in os.environ:
        pytest.fail("CI is set but no `chromium` is on PATH: `make test` (make browser) "
                    "installs Debian's chromium package")
    pytest.skip("no `chromium` on PATH: install Debian's chromium (`make browser`) to render "
                "report.html; with CI set this is a failure, not a skip")


@dataclass
class Opened:
    """A page as a reader opened it, and what went wrong or was fetched meanwhile."""

    page: object  # playwright.sync_api.Page
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page fetched


@contextmanager
def opened(path: Path, width: int = 1400, height: int = 900) -> Iterator[Opened]:
    """`path` loaded in headless Chromium at a window of width x height CSS pixels."""
    binary = chromium_binary()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            seen = Opened(page)
            page.on("console", lambda m: seen.errors.append(f"console: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: seen.errors.append(f"page error: {e}"))
            page.on("request", lambda r: seen.requests.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            yield seen
        finally:
            browser.close()


# The right edge of every element of the page that is drawn (a closed <details>'s content
# is not), and the page's width: nothing may stick out past the window.
WIDEST_ELEMENTS = """() => {
  const width = document.documentElement.clientWidth;
  const wider = [];
  for (const e of document.querySelectorAll('body *')) {
    const box = e.getBoundingClientRect();
    if (box.width > 0 && box.right > width + 0.5) {
      wider.push(`${e.tagName.toLowerCase()}.${e.getAttribute('class') || ''} right ${box.right}`);
    }
  }
  return {width, scrollWidth: document.documentElement.scrollWidth, wider};
}"""
