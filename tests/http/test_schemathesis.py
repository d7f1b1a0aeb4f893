"""schemathesis against a real secure node's /v1/openapi.json: requests generated from the
document, sent with the admin token over mutual TLS, get no 5xx, and every answer conforms
to the document (status, content type, body schema).

Bounded: a few examples per operation (MAX_EXAMPLES), derandomized so a run repeats, the
explicit and generate phases only (no shrinking against a live cluster).
"""

from __future__ import annotations

import json
import urllib.request

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.cluster import module_cluster

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 3
# not_a_server_error is checked by `_no_server_error` (a leaderless moment's 503 is by design).
CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]
# A worker's long poll waits up to this (a generated waitMs beyond it is a 400).
OVERRIDES = {"worker_poll_max_wait_ms": "200"}
# Operations not fuzzed, and why: each changes the cluster under the test (a leadership
# transfer or membership change is a 503 or a redirect by design), or never ends.
LEFT_OUT = {
    ("GET", "/v1/events"): "a server-sent event stream: it does not end",
    ("POST", "/v1/cluster/transfer-leadership"): "moves the leader (then 307/503 by design)",
    ("POST", "/v1/rpc/OperationsService/TransferLeadership"): "moves the leader",
    ("POST", "/v1/rpc/OperationsService/AddNode"): "membership change",
    ("POST", "/v1/rpc/OperationsService/RemoveNode"): "membership change",
}
# Connect's paths serve the same servicers with the same bodies as /v1/rpc: one of each is
# fuzzed (tests/http/test_api.py covers Connect's error JSON).
CONNECT_SAMPLE = {"/gnomon.v1.JobService/CreateJob", "/gnomon.v1.JobService/GetJob"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with module_cluster(tmp_path_factory.mktemp("fuzz-http"), OVERRIDES, request=request,
                        http=True, secure=True) as c:
        yield c


def _fuzzed(method: str, path: str) -> bool:
    if (method, path) in LEFT_OUT:
        return False
    return not path.startswith("/gnomon.v1.") or path in CONNECT_SAMPLE


def test_generated_requests_get_no_5xx_and_answers_conform_to_the_document(cluster):
    leader = cluster.leader()
    tls = cluster.client_tls()
    transport = {"verify": tls["ca_file"], "cert": (tls["cert_file"], tls["key_file"]),
                 "timeout": 15}
    auth = {"Authorization": f"Bearer {cluster.admin_token()}"}
    doc = _document(leader.url, tls)
    schema = schemathesis.openapi.from_dict(doc)
    failures: list[str] = []
    ran = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if not _fuzzed(operation.method.upper(), operation.path):
            continue
        ran += 1

        @hypothesis.settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                             derandomize=True, phases=[Phase.explicit, Phase.generate],
                             suppress_health_check=list(HealthCheck))
        @hypothesis.given(case=operation.as_strategy())
        def exercise(case) -> None:
            response = case.call(base_url=leader.url, headers=auth, **transport)
            _no_server_error(response)
            case.validate_response(response, checks=CHECKS)

        try:
            exercise()
        except Exception as exc:  # noqa: BLE001 - collected: every operation gets its run
            failures.append(f"{operation.label}: {exc}")
    assert ran > 80, ran
    assert not failures, "\n\n".join(failures)


def _no_server_error(response) -> None:
    """No 5xx, but for UNAVAILABLE: on a loaded machine an election may leave the cluster a
    moment without a leader, answered 503 with Retry-After by design."""
    if response.status_code < 500:
        return
    body = response.json() if "json" in response.headers.get("Content-Type", "") else {}
    unavailable = response.status_code == 503 and "unavailable" in (
        body.get("code", "").lower(), body.get("type", "").rsplit(":", 1)[-1])
    assert unavailable, f"{response.status_code}: {response.text[:2000]}"


def _document(url: str, tls: dict) -> dict:
    import ssl

    ctx = ssl.create_default_context(cafile=tls["ca_file"])
    ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
    with urllib.request.urlopen(f"{url}/v1/openapi.json", context=ctx, timeout=10) as r:
        return json.loads(r.read())
