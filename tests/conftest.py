"""How `make test` spreads the suite over pytest-xdist workers (`--dist loadgroup`).

Each test file is one group, so a module-scoped cluster is started once, in one worker. The
files that use something of the whole host run one after another in a group of their own:
the jepsen tier (one bridge, one subnet, network namespaces), and `gnomon dev` with its fixed
default ports (the README test, test_dev) or with libfaketime in its environment (catch-up).
The longest groups go first so that no worker is left with a long file at the end.
"""

from __future__ import annotations

import pytest

HOST_GROUP = "host"
HOST_FILES = (
    "tests/jepsen/",
    "tests/integration/test_readme.py",
    "tests/integration/test_dev.py",
    "tests/integration/test_catch_up.py",
)
# Files of a minute or more; scheduled right after the host group.
LONG_FILES = ("tests/bench/", "tests/integration/test_fuzz_api.py",
              "tests/integration/test_worker_stream_bounds.py",
              "tests/integration/test_storage_faults.py")


def _group(path: str) -> str:
    return HOST_GROUP if path.startswith(HOST_FILES) else path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return 0 if _group(path) == HOST_GROUP else 1 if path.startswith(LONG_FILES) else 2

    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item.nodeid.split("::", 1)[0])))
    items.sort(key=rank)  # stable: the order inside each rank is the collection order
