import pytest

from tests.support.cluster import LocalCluster


@pytest.fixture
def make_cluster(tmp_path, request):
    """Start real node processes; on failure print their logs; always stop them."""
    clusters: list[LocalCluster] = []

    def make(size: int = 3, **overrides: str) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"c{len(clusters)}", size, overrides).start()
        clusters.append(cluster)
        return cluster

    yield make
    failed = getattr(request.node, "rep_call", None)
    for cluster in clusters:
        cluster.stop()
        if failed is not None and failed.failed:
            print(cluster.logs())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
