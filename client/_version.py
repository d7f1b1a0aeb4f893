"""The SDK's and CLI's version: the installed gnomon-client distribution's
(client-dist/pyproject.toml; the server distribution gnomon has the same version and pins this
one: tests/unit/test_packaging.py)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("gnomon-client")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    VERSION = "0+unknown"
