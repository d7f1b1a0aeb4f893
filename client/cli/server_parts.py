"""Commands that run code of the server distribution ``gnomon`` (the node, the gateway, the
Jepsen harness, the benchmarks) in a process of their own. ``pip install gnomon-client`` has
none of it: such a command then says which package to install, before starting anything,
instead of a child's traceback."""

from __future__ import annotations

import importlib.util

from .values import UsageError

__all__ = ["SERVER_DISTRIBUTION", "require_server"]

SERVER_DISTRIBUTION = "gnomon"


def require_server(command: str, module: str) -> None:
    """Raise a UsageError naming the package when ``module``'s top package (``gnomon.node``,
    ``gnomon.gateway``, ...) is not installed. Only its spec is looked up: the client process
    never runs the node's code (an import-linter contract)."""
    top = ".".join(module.split(".")[:2])
    if importlib.util.find_spec(top) is None:
        raise UsageError(
            f"`gnomon {command}` needs the server distribution ({top} is not installed): "
            f"pip install {SERVER_DISTRIBUTION} (gnomon-client has the SDK, the CLI and the "
            "workers only)"
        )
