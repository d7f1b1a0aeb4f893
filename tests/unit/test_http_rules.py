"""The HTTP routes come from api.proto's google.api.http options, every route served before
the annotations still is, and the stubs a client imports need no googleapis-common-protos."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gnomon.node.api.http.api import ROUTE_EXTRAS, SERVED_SERVICES, all_routes, annotated_routes
from gnomon.v1 import api_pb2
from gnomon.v1.http_rules import HTTP_RULES

ROOT = Path(__file__).resolve().parents[2]

# Every route the hand-written table served at 0.1.0 (users' scripts call them), path
# parameters by position; and POST /v1/rpc/<Service>/<Method> for every unary RPC.
ROUTES_AT_0_1_0 = [
    ("GET", "/v1/cluster"),
    ("POST", "/v1/cluster/limits"),
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs/{job_id}"),
    ("PUT", "/v1/jobs/{job_id}"),
    ("PATCH", "/v1/jobs/{job_id}"),
    ("DELETE", "/v1/jobs/{job_id}"),
    ("POST", "/v1/jobs/{job_id}/pause"),
    ("POST", "/v1/jobs/{job_id}/resume"),
    ("POST", "/v1/jobs/{job_id}/trigger"),
    ("GET", "/v1/jobs/{job_id}/runs"),
    ("POST", "/v1/jobs/{job_id}/circuit/reset"),
    ("POST", "/v1/jobs/{job_id}/backfill"),
    ("POST", "/v1/jobs/{job_id}/backfill/cancel"),
    ("GET", "/v1/queue-circuits"),
    ("POST", "/v1/tenants/{tenant}/queues/{queue}/circuit"),
    ("GET", "/v1/jobs/{job_id}/schedule/preview"),
    ("POST", "/v1/schedules/preview"),
    ("GET", "/v1/tenants/{tenant}/jobs"),
    ("GET", "/v1/tenants/{tenant}/jobs/{name}"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/runs/{run_id}"),
    ("POST", "/v1/runs/{run_id}/cancel"),
    ("POST", "/v1/runs/{run_id}/rerun"),
    ("POST", "/v1/runs/{run_id}/tasks/{task_name}/retry"),
    ("POST", "/v1/runs/{run_id}/tasks/{task_name}/cancel"),
    ("GET", "/v1/dlq"),
    ("GET", "/v1/tenants/{tenant}/dlq"),
    ("POST", "/v1/dlq/replay"),
    ("GET", "/v1/whoami"),
    ("GET", "/v1/tokens"),
    ("POST", "/v1/tokens"),
    ("POST", "/v1/tokens/{token_id}/revoke"),
    ("GET", "/v1/tenants"),
    ("POST", "/v1/tenants"),
    ("GET", "/v1/tenants/{tenant}"),
    ("PUT", "/v1/tenants/{tenant}"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/queues"),
    ("GET", "/v1/workers"),
    ("GET", "/v1/active-runs"),
    ("POST", "/v1/cluster/transfer-leadership"),
    ("POST", "/v1/worker/lease"),
    ("POST", "/v1/worker/heartbeat"),
    ("POST", "/v1/worker/complete"),
    ("POST", "/v1/worker/fail"),
    ("GET", "/v1/events"),
    ("GET", "/v1/openapi.json"),
]


def _shape(path: str) -> str:
    return re.sub(r"{\w+}", "{}", path)


def test_every_route_served_at_0_1_0_is_still_served():
    served = {(r.method, _shape(r.path)) for r in all_routes()}
    missing = [(m, p) for m, p in ROUTES_AT_0_1_0 if (m, _shape(p)) not in served]
    assert not missing
    for service in SERVED_SERVICES:
        for m in api_pb2.DESCRIPTOR.services_by_name[service].methods:
            if not (m.client_streaming or m.server_streaming):
                assert ("POST", f"/v1/rpc/{service}/{m.name}") in served
                assert ("POST", f"/gnomon.v1.{service}/{m.name}") in served


def test_routes_are_the_annotations_and_every_extra_names_one():
    routes = annotated_routes()
    assert [(r.rpc, r.method) for r in routes] == [(b["rpc"], b["method"]) for b in HTTP_RULES]
    get_by_name = next(r for r in routes if r.path == "/v1/tenants/{tenant}/jobs/{name}")
    assert get_by_name.path_fields == {"tenant": "job.tenant", "name": "job.name"}
    bindings = {(b["method"], b["path"]) for b in HTTP_RULES}
    assert set(ROUTE_EXTRAS) <= bindings, "an extra for a binding api.proto no longer has"


@pytest.mark.parametrize("path, rule", [
    ("/v1/{name=jobs/*}", "is not a field path (no patterns)"),
    ("/v1/{job.name}/x/{name}", "two path variables named 'name'"),
])
def test_a_template_the_router_cannot_serve_is_refused_by_name(path, rule):
    with pytest.raises(ValueError, match=re.escape(rule)):
        annotated_routes(({"rpc": "JobService.GetJob", "method": "GET", "path": path,
                           "body": ""},))


def test_the_stubs_import_without_googleapis_common_protos():
    """A client has grpcio, protobuf and pyyaml only: importing the stubs with google.api
    and google.rpc unimportable works, and the options are not in their descriptors."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[:2] in (['google', 'api'], ['google', 'rpc']):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from gnomon.v1 import api_pb2, worker_pb2, types_pb2, http_rules\n"
        "m = api_pb2.DESCRIPTOR.services_by_name['JobService'].methods_by_name['CreateJob']\n"
        "assert not m.GetOptions().ListFields(), m.GetOptions()\n"
        "assert not [n for n in sys.modules if n.startswith(('google.api', 'google.rpc'))]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def _generate_module():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "proto" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stripping_leaves_the_proto_without_google_api_and_refuses_a_leftover():
    generate = _generate_module()
    text = (ROOT / "proto" / "gnomon" / "v1" / "api.proto").read_text()
    assert "option (google.api.http)" in text
    stripped = generate.strip_http_annotations(text, "api.proto")
    assert "(google.api." not in stripped and "google/api/" not in stripped
    assert "rpc CreateJob(CreateJobRequest) returns (CreateJobResponse);" in stripped
    with pytest.raises(SystemExit, match="google.api reference is left"):
        generate.strip_http_annotations(
            text.replace("{\n    option (google.api.http)",
                         "{\n    option (google.api.method_signature) = \"job\";\n"
                         "    option (google.api.http)", 1), "api.proto")
