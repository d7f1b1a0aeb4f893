"""Debian's Chromium for Playwright: where it is and how it is started (no browser download)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("GNOMON_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
