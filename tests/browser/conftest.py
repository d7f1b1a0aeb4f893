"""Debian's Chromium, headless, driven by Playwright against a real 3-node cluster.

No browser download: Playwright launches /usr/bin/chromium (`.ci/run` installs the package;
GNOMON_CHROMIUM overrides the path). Each browser gets a fresh temporary profile. Screenshots
go to .gnomon/test-output/browser/ under the repository (GNOMON_TEST_OUTPUT overrides the
folder), one PNG per page and test, named <test>-<page>.png. With GNOMON_DOCS_SCREENSHOTS=1
the accessibility audit also writes each page to docs/dashboard-<page>.png (the README's).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.browser import ARGS, CHROMIUM
from tests.support.cluster import module_cluster

DOCS = Path(__file__).resolve().parents[2] / "docs"
OUTPUT = Path(os.environ.get("GNOMON_TEST_OUTPUT",
                             Path(__file__).resolve().parents[2] / ".gnomon" / "test-output")
              ) / "browser"


@pytest.fixture(scope="module")
def browser():
    # Module scope, not session: Playwright's sync API runs an event loop on this thread while
    # it is open, and a later test's asyncio.run() would fail ("cannot be called from a
    # running event loop").
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    # Leases short enough that a dead worker's task is retried quickly; fires every 1 s jobs.
    with module_cluster(tmp_path_factory.mktemp("browser"), {"min_interval_ms": "100"},
                        request=request, http=True) as c:
        yield c


class Page:
    """A Playwright page that records console errors and uncaught exceptions, and writes
    screenshots under OUTPUT."""

    def __init__(self, page, name: str):
        self.page = page
        self.name = name
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))

    def shot(self, label: str) -> Path:
        OUTPUT.mkdir(parents=True, exist_ok=True)
        path = OUTPUT / f"{self.name}-{label}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def docs_shot(self, name: str) -> None:
        """With GNOMON_DOCS_SCREENSHOTS=1: the visible part of the page as
        docs/dashboard-<name>.png (the README's pictures)."""
        if os.environ.get("GNOMON_DOCS_SCREENSHOTS"):
            self.page.screenshot(path=str(DOCS / f"dashboard-{name}.png"))

    def script_errors(self) -> list[str]:
        """Errors of the page's own code: uncaught exceptions and console.error calls, not
        the browser's notes about responses the test provoked (a 400 it asked for)."""
        return self.page_errors + [m for m in self.console_errors
                                   if not m.startswith("Failed to load resource")]


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    p = Page(context.new_page(), request.node.name.removeprefix("test_"))
    p.page.set_default_timeout(20_000)
    yield p
    context.close()
