import pytest

from tests.support.cluster import module_cluster

# Two event streams per node: the bound is reached by a test without opening 64. One web
# origin besides the cluster's own that may call the nodes (test_api.py, CORS).
OVERRIDES = {"http_max_event_streams": "2", "http_cors_origins": "https://dashboard.example"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("http"), OVERRIDES, request=request,
                        http=True) as c:
        yield c
