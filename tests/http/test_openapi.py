"""/v1/openapi.json against the routes a real node serves and against the protos."""

from __future__ import annotations

import re

import pytest

from gnomon.node.api.http.api import SERVED_SERVICES, all_routes
from gnomon.v1 import api_pb2, worker_pb2
from tests.support.http import call

pytestmark = pytest.mark.integration

# RPCs with no HTTP route, and why.
NOT_ROUTED = {
    "ClusterService.ExportHistory": "node-to-node history backfill stream",
    "OperationsService.CreateBackup": "a stream of file chunks (gnomon cluster backup)",
}


@pytest.fixture(scope="module")
def doc(cluster):
    r = call(cluster.leader().url, "GET", "/v1/openapi.json")
    assert r.status == 200 and r.content_type == "application/json"
    return r.json


def _documented(doc) -> set[tuple[str, str]]:
    return {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}


def test_every_documented_operation_is_served_and_nothing_else(cluster, doc):
    node = cluster.leader()
    documented = _documented(doc)
    assert documented == {(r.method, r.path) for r in all_routes()}
    for method, path in sorted(documented):
        if path == "/v1/events":
            continue  # a stream; tests/http/test_api.py reads it
        concrete = re.sub(r"{(\w+)}", lambda m: f"x{m.group(1)}", path)
        r = call(node.url, method, concrete, {} if method in ("POST", "PUT") else None)
        no_route = r.status in (404, 405) and r.json.get("detail", "").endswith(
            ("no such route", "method not allowed on this route"))
        assert not no_route, (method, path, r.text)
    for method, path in [("GET", "/v1/job"), ("DELETE", "/v1/cluster"), ("PUT", "/v1/dlq")]:
        r = call(node.url, method, path)
        assert r.status in (404, 405) and r.content_type == "application/problem+json", path


def test_operations_name_their_rpc_and_its_message_types(doc):
    services = {**api_pb2.DESCRIPTOR.services_by_name, **worker_pb2.DESCRIPTOR.services_by_name}
    schemas = doc["components"]["schemas"]
    routed = set()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            rpc = op.get("x-grpc-method")
            if not rpc:
                continue
            service, name = rpc.removeprefix("gnomon.v1.").split(".")
            m = services[service].methods_by_name[name]
            routed.add(f"{service}.{name}")
            ok = next(v for k, v in op["responses"].items() if k.startswith("2"))
            assert ok["content"]["application/json"]["schema"]["$ref"].endswith(
                m.output_type.full_name), (method, path)
            if "requestBody" in op:
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                body = schemas[ref.rsplit("/", 1)[1]]
                # PATCH's body is the request message's fields and updateMask (patch.py)
                assert ref.endswith(m.input_type.full_name) or body.get(
                    "x-grpc-message") == m.input_type.full_name, (method, path)
            fields = m.input_type.fields_by_name
            for param in op["parameters"]:
                if param["in"] == "query":
                    name = param.get("x-alias-of", param["name"])  # ?job= for job_id
                    assert name.split(".")[0] in fields, (path, param)
            if "request_id" in fields:
                assert any(p["name"] == "Idempotency-Key" for p in op["parameters"]), path
    # Every RPC of the services the HTTP port serves has a route (a unary one at least
    # POST /v1/rpc/<Service>/<Method>), streams excepted.
    every = {f"{s.name}.{m.name}" for s in services.values() if s.name in SERVED_SERVICES
             for m in s.methods if not (m.client_streaming or m.server_streaming)}
    missing = every - routed - set(NOT_ROUTED)
    assert not missing, (f"RPCs without an HTTP route: {sorted(missing)}; add a "
                         "google.api.http option in api.proto (or to NOT_ROUTED here, with the reason)")
    assert not (set(NOT_ROUTED) & routed), "NOT_ROUTED lists an RPC that has a route"
    # Every message schema lists exactly the proto's fields, by their JSON names, and for a
    # bytes field its base64 form (<field>Base64; node/api/http/jsonbytes.py).
    for name, schema in schemas.items():
        if name in ("Problem", "ConnectError"):  # error bodies, not messages
            continue
        extra = set()
        if "x-grpc-message" in schema:  # PATCH's body
            name, extra = schema["x-grpc-message"], {"updateMask"}
        desc = api_pb2.DESCRIPTOR.pool.FindMessageTypeByName(name)
        fields = {f.json_name for f in desc.fields} | extra | {
            f"{f.json_name}Base64" for f in desc.fields if f.type == f.TYPE_BYTES}
        assert set(schema["properties"]) == fields, name
    refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', __import__("json").dumps(doc))
    assert set(refs) <= set(schemas)


def test_the_bearer_security_scheme_is_declared(doc):
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http", "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"]}
    assert doc["security"] == [{"bearerAuth": []}]


def _validator(doc, message: str):
    import jsonschema

    root = {"$ref": f"#/components/schemas/{message}", "components": doc["components"]}
    return jsonschema.Draft202012Validator(root)


def test_answers_validate_against_the_document_and_a_schedule_is_one_kind(cluster, doc):
    """The schema types what the node really answers (payloads as JSON values, 64-bit
    integers as strings), and the schedule is a oneOf: a spec with two kinds breaks the
    document's rule, and the node refuses it naming the field."""
    leader = cluster.leader()
    schedules = {"cron": {"expression": "*/5 * * * *"}, "interval": {"intervalMs": "60000"},
                 "once": {"atMs": "4102444800000"}}
    for kind, schedule in schedules.items():
        spec = {"name": f"openapi-{kind}", "schedule": {kind: schedule}, "paused": True,
                "tasks": [{"name": "main", "payload": {"cmd": ["echo", kind], "n": 1}}]}
        r = call(leader.url, "POST", "/v1/jobs", {"spec": spec})
        assert r.status == 201, r.text
        errors = list(_validator(doc, "gnomon.v1.CreateJobResponse").iter_errors(r.json))
        assert not errors, [e.message for e in errors]
        got = call(leader.url, "GET", f"/v1/jobs/{r.json['job']['jobId']}")
        assert not list(_validator(doc, "gnomon.v1.GetJobResponse").iter_errors(got.json))
    both = {"spec": {"name": "openapi-both", "tasks": [{"name": "main"}],
                     "schedule": {"cron": schedules["cron"], "interval": schedules["interval"]}}}
    assert not _validator(doc, "gnomon.v1.CreateJobRequest").is_valid(both)
    r = call(leader.url, "POST", "/v1/jobs", both)
    assert r.status == 400 and "schedule" in r.json["detail"], r.text


def test_every_operation_message_and_field_is_described_from_the_proto(doc):
    from gnomon.node.api.http.openapi import comments

    assert doc["paths"]["/v1/jobs"]["post"]["description"] == comments()[
        "gnomon.v1.JobService.CreateJob"]
    undescribed = [f"{m.upper()} {p}" for p, ops in doc["paths"].items()
                   for m, op in ops.items() if "x-grpc-method" in op and not op.get("description")]
    for name, schema in doc["components"]["schemas"].items():
        if not schema.get("description") and "x-grpc-message" not in schema:
            undescribed.append(name)
        undescribed += [f"{name}.{field}" for field, prop in schema["properties"].items()
                        if not prop.get("description")]
    assert not undescribed, (f"{len(undescribed)} without a proto comment (add one above "
                             f"the element in proto/gnomon/v1/*.proto, then `make proto`): "
                             f"{undescribed[:20]}")
