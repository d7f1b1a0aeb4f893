"""How `make test` spreads the suite over pytest-xdist workers (`-n`, scheduler below).

Each test file is one unit of work, so a module-scoped cluster is started once, in one
worker. Files that share something of the whole host are one unit together and run one after
another: the jepsen runs (one bridge, one subnet, network namespaces), and `gnomon dev` in
the repository (the README test on the fixed default ports, and test_dev beside it). The
longest units go first so that no worker is left with a long file at the end.

(xdist's own `--dist loadgroup` relies on rewriting node ids, which pytest 9 ignores: its
groups were silently split, and two jepsen runs shared one bridge.)
"""

from __future__ import annotations

from typing import Any

import pytest

HOST_UNITS = {
    "host:jepsen": ("tests/jepsen/test_smoke.py", "tests/jepsen/test_canaries.py",
                    "tests/jepsen/test_faults.py"),
    "host:dev": ("tests/integration/test_readme.py", "tests/integration/test_dev.py"),
}
# Files of a minute or more; scheduled right after the host units.
LONG_FILES = ("tests/bench/", "tests/integration/test_fuzz_api.py",
              "tests/integration/test_catch_up.py",
              "tests/integration/test_worker_stream_bounds.py",
              "tests/integration/test_storage_faults.py")


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the host unit it shares."""
    path = nodeid.split("::", 1)[0]
    return next((unit for unit, files in HOST_UNITS.items() if path.startswith(files)), path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker: the collection order stays
        return
    def rank(item: pytest.Item) -> int:
        unit = unit_of(item.nodeid)
        return 0 if unit in HOST_UNITS else 1 if unit.startswith(LONG_FILES) else 2

    items.sort(key=rank)  # stable: the order inside each rank is the collection order


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """Whole units (see the module docstring) to one worker each, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The resource tier's figures (tests/support/resources.py), when any attack ran here."""
    import os

    from tests.support import resources

    if not resources.RESULTS:
        return
    terminalreporter.write_sep("=", "resource tier: the node before, at its peak, after")
    terminalreporter.write(resources.table(resources.RESULTS))
    if os.environ.get("GNOMON_RESOURCE_REPORT"):
        resources.write_report(os.environ["GNOMON_RESOURCE_REPORT"])
