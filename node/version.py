"""The node's version: the installed distribution's (pyproject.toml is the one source)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("gnomon")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    VERSION = "0+unknown"
