"""The OpenAPI 3.1 document of the HTTP API, generated from the route table and the proto
descriptors (so a field added to a message appears in it without an edit here), described by
the proto comments (gnomon/v1/comments.json, written by `make proto`)."""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor as _d

from gnomon.node.api.http.api import IDEMPOTENCY_HEADER, UPDATE_MASK_FIELDS, Route, all_routes
from gnomon.node.api.http.jsonbytes import JSON_SUFFIX

if TYPE_CHECKING:
    from gnomon.node.api.http.api import AnyDescriptor, AnyFieldDescriptor

_SCALARS: dict[int, dict[str, object]] = {
    _d.FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
    _d.FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    _d.FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    _d.FieldDescriptor.TYPE_SINT32: {"type": "integer", "format": "int32"},
    _d.FieldDescriptor.TYPE_UINT32: {"type": "integer", "format": "int32"},
    _d.FieldDescriptor.TYPE_FIXED32: {"type": "integer", "format": "int32"},
    # Canonical proto JSON writes 64-bit integers as strings (and reads both).
    _d.FieldDescriptor.TYPE_INT64: {"type": ["string", "integer"], "format": "int64"},
    _d.FieldDescriptor.TYPE_SINT64: {"type": ["string", "integer"], "format": "int64"},
    _d.FieldDescriptor.TYPE_UINT64: {"type": ["string", "integer"], "format": "uint64"},
    _d.FieldDescriptor.TYPE_FIXED64: {"type": ["string", "integer"], "format": "uint64"},
    _d.FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    _d.FieldDescriptor.TYPE_STRING: {"type": "string"},
    # Bytes fields are JSON values both ways (jsonbytes.py); raw bytes in `<field>Base64`.
    _d.FieldDescriptor.TYPE_BYTES: {
        "description": "a JSON value (object, array, number, boolean), stored as its UTF-8 "
                       "JSON text; null: no bytes. In a request a string is base64 of raw "
                       "bytes (the proto JSON shape); an answer has this field only when the "
                       "bytes are such JSON text, else the field named with the Base64 suffix"},
}
BASE64_SCHEMA = {"type": "string", "contentEncoding": "base64",
                 "description": "raw bytes, base64 (standard or URL-safe, padding optional): "
                                "in an answer when the bytes are not JSON; not together with "
                                "the JSON field"}
# The body of PATCH /v1/jobs/{job_id} (patch.py): UpdateJobRequest's fields and updateMask.
PATCH_SCHEMA = "UpdateJobPatch"
UPDATE_MASK_SCHEMA = {
    "type": ["string", "array"], "items": {"type": "string"},
    "description": "the JobSpec fields to change: a google.protobuf.FieldMask in its JSON "
                   "form, comma-separated paths (lowerCamelCase or snake_case, dotted into "
                   "singular messages: \"schedule.cron.timezone,priority,tasks\"), or an "
                   "array of them. A path takes the body's value (absent: the default); a "
                   "list is replaced whole; every other field keeps the job's value."}

PROBLEM_SCHEMA = {
  "type": "object", "required": ["status", "code", "detail"],
  "description": "An error answer: RFC 9457 problem details carrying the gRPC status that the "
                 "same call over gRPC gets (node/api/http/problems.py)",
  "properties": {
    "type": {"type": "string", "description": "urn:gnomon:problem:<the gRPC code, kebab-case>"},
    "title": {"type": "string", "description": "the HTTP status phrase"},
    "status": {"type": "integer", "description": "the HTTP status code"},
    "detail": {"type": "string", "description": "the gRPC status message, verbatim"},
    "code": {"type": "string", "description": "the gRPC status code name"},
    "field": {"type": "string", "description": "the field the detail names ('' if none)"},
    "rule": {"type": "string", "description": "the rule it broke (the detail after the field)"},
    "reason": {"type": "string", "description": "the gnomon-reason, when one applies"},
    "leader": {"type": "string", "description": "the leader's gRPC address (not the leader)"},
    "details": {"type": "array", "items": {
        "type": "object", "required": ["@type"],
        "properties": {"@type": {"type": "string"}}},
        "description": "the google.rpc.Status details the same call carries over gRPC, in "
                       "their JSON form: ErrorInfo (reason, domain gnomon.dev, metadata), "
                       "RetryInfo (retryDelay), BadRequest (fieldViolations: field, "
                       "description)"},
  }}
CONNECT_ERROR_SCHEMA = {
  "type": "object", "required": ["code"],
  "description": "Connect's error JSON (node/api/http/connect.py)",
  "properties": {
    "code": {"type": "string", "description": "the gRPC code in snake_case (not_found)"},
    "message": {"type": "string", "description": "the gRPC status message, verbatim"},
    "details": {"type": "array", "items": {
        "type": "object", "required": ["type", "value"],
        "properties": {"type": {"type": "string"}, "value": {"type": "string"},
                       "debug": {"type": "object"}}},
        "description": "google.rpc details: type name, base64 of the message, its JSON"},
  }}


@functools.cache
def comments() -> dict[str, str]:
    """Full proto name -> its comment (proto/generate.py)."""
    text = importlib.resources.files("gnomon.v1").joinpath("comments.json").read_text()
    return dict(json.loads(text))


def _described(schema: dict, full_name: str) -> dict:
    """`schema` with the proto comment of `full_name` first in its description."""
    comment = comments().get(full_name)
    if not comment:
        return schema
    rest = schema.get("description")
    return schema | {"description": f"{comment} ({rest})" if rest else comment}


def _message_schema(desc: AnyDescriptor, schemas: dict) -> dict:
    ref = {"$ref": f"#/components/schemas/{desc.full_name}"}
    if desc.full_name in schemas:
        return ref
    schemas[desc.full_name] = {}  # placeholder for recursion
    props = {}
    for f in desc.fields:
        props[f.json_name] = _described(_field_schema(f, schemas), f.full_name)
        if f.type == f.TYPE_BYTES and not f.is_repeated:
            props[f.json_name + JSON_SUFFIX] = dict(BASE64_SCHEMA)
    schema = {"type": "object", "properties": props, "additionalProperties": False}
    # A oneof (Schedule's kind, a bulk result): exactly one of its fields is set.
    choices = [{"oneOf": [{"required": [f.json_name]} for f in o.fields]}
               for o in desc.oneofs if not _synthetic(o)]
    if len(choices) == 1:
        schema |= choices[0]
    elif choices:
        schema["allOf"] = choices
    schemas[desc.full_name] = _described(schema, desc.full_name)
    return ref


def _synthetic(oneof: Any) -> bool:
    """The oneof protoc makes for a proto3 `optional` field (not a choice)."""
    return len(oneof.fields) == 1 and oneof.name == f"_{oneof.fields[0].name}"


def _field_schema(f: AnyFieldDescriptor, schemas: dict) -> dict:
    if f.type == f.TYPE_MESSAGE:
        assert f.message_type is not None  # a message field has its message type
        if f.message_type.GetOptions().map_entry:
            value = f.message_type.fields_by_name["value"]
            return {"type": "object", "additionalProperties": _field_schema(value, schemas)}
        one = _message_schema(f.message_type, schemas)
    elif f.type == f.TYPE_ENUM:
        assert f.enum_type is not None  # an enum field has its enum type
        values = f.enum_type.values
        one = {"type": "string", "enum": [v.name for v in values]}
        said = [f"{v.name}: {comments()[name]}" for v in values
                if (name := f"{f.enum_type.full_name}.{v.name}") in comments()]
        if said:
            one["description"] = "; ".join(said)
    else:
        one = dict(_SCALARS[f.type])
    if f.is_repeated:
        return {"type": "array", "items": one}
    return one


def _query_params(route: Route) -> list[dict]:
    """Top-level scalar fields of the request message as query parameters (GET, DELETE),
    minus those a path parameter sets."""
    cls = route.request_type()
    if cls is None or route.body:
        return []
    taken = {p.split(".")[0] for p in route.path_fields.values()}
    out = []
    for f in cls.DESCRIPTOR.fields:
        if f.name in taken or f.name == "request_id":
            continue
        if f.type == f.TYPE_MESSAGE:
            assert f.message_type is not None  # a message field has its message type
            out += [_query_param(f"{f.name}.{sub.name}", sub) for sub in f.message_type.fields
                    if sub.type != sub.TYPE_MESSAGE]
            continue
        out.append(_query_param(f.name, f))
    for alias, target in route.query_aliases.items():
        param = _query_param(alias, cls.DESCRIPTOR.fields_by_name[target])
        param["description"] = f"The same as {target}: {param.get('description', '')}"
        param["x-alias-of"] = target
        out.append(param)
    return out


def _query_param(name: str, f: AnyFieldDescriptor) -> dict:
    param = {"name": name, "in": "query", "schema": _field_schema(f, {})}
    return _described(param, f.full_name)


def _patch_schema(request: dict) -> dict:
    props = dict(request["properties"]) | {UPDATE_MASK_FIELDS[0]: UPDATE_MASK_SCHEMA}
    return {"type": "object", "required": [UPDATE_MASK_FIELDS[0]], "properties": props,
            "additionalProperties": False, "x-grpc-message": "gnomon.v1.UpdateJobRequest",
            "description": "UpdateJobRequest's fields and updateMask: the job's fields the "
                           "mask names take the body's values, the others keep theirs"}


def summary(route: Route) -> str:
    """The route's own summary, else the first sentence of its RPC's proto comment."""
    if route.summary or not route.rpc:
        return route.summary
    comment = comments().get(f"gnomon.v1.{route.rpc}", route.rpc)
    first, sep, _ = comment.partition(". ")
    return first + "." if sep else comment


def operation_id(route: Route) -> str:
    words = re.sub(r"[{}]", "", route.path).strip("/").replace("/", "_").replace(".", "_")
    return f"{route.method.lower()}_{words}"


def document() -> dict:
    schemas: dict = {}
    paths: dict = {}
    for route in all_routes():
        op: dict = {"operationId": operation_id(route), "summary": summary(route),
                    "parameters": [{"name": p, "in": "path", "required": True,
                                    "schema": {"type": "string"}} for p in
                                   re.findall(r"{(\w+)}", route.path)]}
        if route.rpc:
            op["x-grpc-method"] = f"gnomon.v1.{route.rpc}"
            if f"gnomon.v1.{route.rpc}" in comments():
                op["description"] = comments()[f"gnomon.v1.{route.rpc}"]
            req, resp = route.request_type(), route.response_type()
            assert req is not None and resp is not None  # an RPC route has both
            op["parameters"] += _query_params(route)
            if "request_id" in req.DESCRIPTOR.fields_by_name:
                op["parameters"].append({
                    "name": IDEMPOTENCY_HEADER, "in": "header", "required": False,
                    "description": "the request_id: a retry with the same key has one effect",
                    "schema": {"type": "string", "maxLength": 128}})
            if route.body:
                body = _message_schema(req.DESCRIPTOR, schemas)
                if route.update_mask:
                    schemas[PATCH_SCHEMA] = _patch_schema(schemas[req.DESCRIPTOR.full_name])
                    body = {"$ref": f"#/components/schemas/{PATCH_SCHEMA}"}
                op["requestBody"] = {"required": route.update_mask, "content": {
                    "application/json": {"schema": body}}}
            ok = {"description": "the response message", "content": {"application/json": {
                "schema": _message_schema(resp.DESCRIPTOR, schemas)}}}
        elif route.path == "/v1/events":
            ok = {"description": "an event stream (node/api/http/events.py)",
                  "content": {"text/event-stream": {"schema": {"type": "string"}}}}
        elif route.path == "/v1/openapi.json":
            ok = {"description": "this document",
                  "content": {"application/json": {"schema": {"type": "object"}}}}
        else:
            ok = None
        responses: dict = {}
        if ok is not None:
            responses[str(route.status)] = ok
        if route.protocol == "connect":
            responses["default"] = {"description": "an error", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ConnectError"}}}}
        else:
            responses["307"] = {"description": "not the leader: repeat the request at Location "
                                               "(the leader's HTTP address)"}
            responses["default"] = {"description": "an error", "content": {
                "application/problem+json": {
                    "schema": {"$ref": "#/components/schemas/Problem"}}}}
        op["responses"] = responses
        paths.setdefault(route.path, {})[route.method.lower()] = op
    schemas["Problem"] = PROBLEM_SCHEMA
    schemas["ConnectError"] = CONNECT_ERROR_SCHEMA
    return {
        "openapi": "3.1.0",
        "info": {"title": "gnomon HTTP/JSON API", "version": "v1",
                 "description": "Bodies are the canonical JSON of the gnomon.v1 proto messages "
                                "named by x-grpc-method, but for bytes fields (task payloads, "
                                "results, run parameters): a JSON value, or base64 in the "
                                "field named with the Base64 suffix; node/api/http/DESIGN.md."},
        "paths": paths,
        # Every route takes the bearer token of the gRPC port (node/security/DESIGN.md); a
        # node started without --admin-token-file accepts calls without one.
        "security": [{"bearerAuth": []}],
        "components": {"schemas": schemas, "securitySchemes": {"bearerAuth": {
            "type": "http", "scheme": "bearer",
            "description": "a gnomon token (`gnomon token create`, or the admin token file)"}}},
    }
