"""Debian's Chromium for Playwright: where it is and how it is started (no browser download)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("GNOMON_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# axe-core's axe.min.js (the accessibility audit, injected by the browser tests only): `.ci/run`
# installs the npm package into this cache; GNOMON_AXE overrides the path.
AXE = os.environ.get("GNOMON_AXE", os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    ".gnomon", "cache", "axe", "node_modules", "axe-core", "axe.min.js"))
