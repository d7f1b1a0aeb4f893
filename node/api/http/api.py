"""The HTTP/JSON API: one table of routes, each calling a gRPC servicer method.

A request becomes the RPC's request message: the body is that message's canonical JSON
(google.protobuf.json_format), query parameters set its fields by name (dotted for nested
fields, snake_case or lowerCamelCase), path parameters set the fields the route names, and
the `Idempotency-Key` header sets `request_id`. The servicer runs exactly as for gRPC; its
answer is the response message's canonical JSON, its abort a problem (problems.py). Bytes
fields (task payloads, results, run parameters) are JSON values both ways (jsonbytes.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from aiohttp import web
from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format
from google.protobuf.message import Message

from gnomon.node.api.grpc.error_details import retry_after_ms
from gnomon.node.api.grpc.errors import LEADER_METADATA_KEY, REASON_METADATA_KEY
from gnomon.node.api.http import jsonbytes
from gnomon.node.api.http.problems import Problem
from gnomon.v1 import api_pb2, worker_pb2
from gnomon.v1.http_rules import HTTP_RULES

if TYPE_CHECKING:
    from google._upb import _message as _upb

    # A message's DESCRIPTOR is upb's (the C backend) or the pure-Python one.
    AnyDescriptor = _descriptor.Descriptor | _upb.Descriptor
    AnyFieldDescriptor = _descriptor.FieldDescriptor | _upb.FieldDescriptor
    AnyEnumDescriptor = _descriptor.EnumDescriptor | _upb.EnumDescriptor

IDEMPOTENCY_HEADER = "Idempotency-Key"
# A PATCH body's `updateMask`, kept on the aiohttp request for patch.py (not a request field).
UPDATE_MASK_KEY = "gnomon.update_mask"
UPDATE_MASK_FIELDS = ("updateMask", "update_mask")


@dataclass(frozen=True)
class Route:
    """One HTTP route. `rpc` is "Service.Method" of api.proto, or "" for a route of the HTTP
    layer itself (events, the OpenAPI document). `summary` "": the RPC's comment's first
    sentence (openapi.py)."""

    method: str
    path: str
    rpc: str
    summary: str
    # path parameter -> field of the request message it sets (dotted)
    path_fields: dict[str, str] = field(default_factory=dict)
    # the request message's JSON is the body (writes); otherwise query parameters set fields
    body: bool = False
    status: int = 200
    # the body also carries `updateMask` (JobSpec paths): patch.py merges onto the job
    update_mask: bool = False
    # short query parameter names -> the request field they set (`?job=` for job_id)
    query_aliases: dict[str, str] = field(default_factory=dict)
    # "connect": Connect's unary protocol (errors as Connect's error JSON, connect.py)
    protocol: str = ""

    @property
    def service(self) -> str:
        return self.rpc.split(".")[0] if self.rpc else ""

    @property
    def method_name(self) -> str:
        return self.rpc.split(".")[1] if self.rpc else ""

    def _message(self, side: str) -> type[Message] | None:
        if not self.rpc:
            return None
        module = SERVICE_MODULES[self.service]
        desc = module.DESCRIPTOR.services_by_name[self.service].methods_by_name[self.method_name]
        return getattr(module, getattr(desc, side).name)

    def request_type(self) -> type[Message] | None:
        return self._message("input_type")

    def response_type(self) -> type[Message] | None:
        return self._message("output_type")


# The generated module of each service the HTTP API calls.
SERVICE_MODULES: dict[str, Any] = {
    **{name: api_pb2 for name in api_pb2.DESCRIPTOR.services_by_name},
    "WorkerService": worker_pb2,
}


# What a route does beyond google.api.http's vocabulary, by (method, the binding's path as
# api.proto writes it).
ROUTE_EXTRAS: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/jobs"): {"status": 201},  # with Location: /v1/jobs/{id}
    # PATCH merges the fields `updateMask` names onto the job (patch.py)
    ("PATCH", "/v1/jobs/{job.job_id}"): {"update_mask": True},
    ("GET", "/v1/runs"): {"query_aliases": {"job": "job_id", "since": "since_ms",
                                            "until": "until_ms"}},
}
_TEMPLATE_VARIABLE = re.compile(r"{([^}]*)}")
_FIELD_PATH = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")


def annotated_routes(rules: tuple[dict[str, str], ...] = HTTP_RULES) -> tuple[Route, ...]:
    """A route per binding of api.proto's `google.api.http` options (gnomon/v1/http_rules.py,
    written by `make proto`). A path variable `{job.job_id}` is the aiohttp parameter
    `{job_id}` (its last name) setting the field `job.job_id`."""
    out = []
    for rule in rules:
        where = f"{rule['rpc']} {rule['method']} {rule['path']}"
        if rule["body"] not in ("", "*"):
            raise ValueError(f"{where}: body must be \"*\" or none (a field is not supported)")
        path, fields = _path_template(rule["path"], where)
        extras = ROUTE_EXTRAS.get((rule["method"], rule["path"]), {})
        out.append(Route(rule["method"], path, rule["rpc"], "", fields, body=rule["body"] == "*",
                         **extras))
    return tuple(out)


def _path_template(template: str, where: str) -> tuple[str, dict[str, str]]:
    """("/v1/jobs/{job_id}", {"job_id": "job.job_id"}) of "/v1/jobs/{job.job_id}"."""
    fields: dict[str, str] = {}
    for variable in _TEMPLATE_VARIABLE.findall(template):
        if not _FIELD_PATH.match(variable):
            raise ValueError(f"{where}: {{{variable}}} is not a field path (no patterns)")
        param = variable.rsplit(".", 1)[-1]
        if param in fields:
            raise ValueError(f"{where}: two path variables named {param!r}")
        fields[param] = variable
    path = _TEMPLATE_VARIABLE.sub(lambda m: "{" + m.group(1).rsplit(".", 1)[-1] + "}", template)
    return path, fields


# worker.proto has no google.api.http options yet: its HTTP routes are named here.
WORKER_ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/worker/lease", "WorkerService.LeaseTasks",
          "A worker without a stream: wait up to waitMs for up to capacity tasks of its "
          "queues, each under a lease", body=True),
    Route("POST", "/v1/worker/heartbeat", "WorkerService.RenewLeases",
          "Renew a worker's leases: each is ok, revoked or cancel", body=True),
    Route("POST", "/v1/worker/complete", "WorkerService.CompleteLease",
          "Report a lease's task done (accepted, or the reason it was not)", body=True),
    Route("POST", "/v1/worker/fail", "WorkerService.FailLease",
          "Report a lease's task failed (retryable or not)", body=True),
)
# Routes of the HTTP layer itself.
LAYER_ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/events", "", "Server-sent events: runs and jobs that changed, "
          "cluster role changes"),
    Route("GET", "/v1/openapi.json", "", "This document"),
)
ROUTES: tuple[Route, ...] = annotated_routes() + WORKER_ROUTES + LAYER_ROUTES


# Services whose every unary RPC is also served at POST /v1/rpc/<Service>/<Method> (the request
# message's JSON as the body): an RPC is on HTTP the moment it lands, named route or not.
SERVED_SERVICES = ("JobService", "ClusterService", "OperationsService", "AccessService")


def rpc_routes() -> tuple[Route, ...]:
    """Each unary RPC of SERVED_SERVICES at POST /v1/rpc/<Service>/<Method> and at Connect's
    unary path POST /gnomon.v1.<Service>/<Method>."""
    out = []
    for name in SERVED_SERVICES:
        service = api_pb2.DESCRIPTOR.services_by_name.get(name)
        if service is None:
            continue
        for m in service.methods:
            if m.client_streaming or m.server_streaming:
                continue
            rpc = f"{name}.{m.name}"
            out.append(Route("POST", f"/v1/rpc/{name}/{m.name}", rpc,
                             f"{rpc}: the request message's JSON as the body", body=True))
            out.append(Route("POST", f"/{service.full_name}/{m.name}", rpc,
                             f"{rpc} by Connect's unary protocol (JSON; errors as Connect's "
                             "error JSON)", body=True, protocol="connect"))
    return tuple(out)


def all_routes() -> tuple[Route, ...]:
    """The named routes, then one generic route per unary RPC."""
    return ROUTES + rpc_routes()


class HttpContext:
    """The part of grpc.aio.ServicerContext the servicers use, for a call made over HTTP.
    `abort` raises a Problem carrying the status and the trailing metadata."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()):
        self.metadata = metadata
        self._trailing: tuple = ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def set_trailing_metadata(self, metadata) -> None:
        self._trailing = tuple(metadata)

    def peer(self) -> str:
        return "http"

    def set_code(self, code) -> None:  # the generated base servicer's "not implemented"
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()):
        md = dict(tuple(trailing_metadata or ()) + self._trailing)
        headers = {}
        wait_ms = retry_after_ms(md)  # admission control: "retry-after-ms"
        if wait_ms is not None:
            headers["Retry-After"] = str(max(1, -(-wait_ms // 1000)))
        raise Problem(code, details, reason=md.get(REASON_METADATA_KEY, ""),
                      leader=md.get(LEADER_METADATA_KEY, ""), headers=headers,
                      retry_after_ms=wait_ms)


def _bad(detail: str) -> Problem:
    return Problem(grpc.StatusCode.INVALID_ARGUMENT, detail)


def _field(desc: AnyDescriptor, name: str) -> AnyFieldDescriptor | None:
    f = desc.fields_by_name.get(name)
    if f is None:
        f = next((x for x in desc.fields if x.json_name == name), None)
    return f


def _scalar(f: AnyFieldDescriptor, text: str, where: str):
    t = f.type
    enum = f.enum_type  # set for an enum field
    try:
        if t == f.TYPE_BOOL:
            if text.lower() in ("true", "1", ""):
                return True
            if text.lower() in ("false", "0"):
                return False
            raise ValueError
        if t == f.TYPE_ENUM:
            if text.lstrip("-").isdigit():
                return _in_range(int(text), _INT_RANGES[f.TYPE_INT32], where)
            assert enum is not None
            value = enum.values_by_name.get(text) or enum.values_by_name.get(
                f"{_enum_prefix(enum)}{text.upper()}")
            if value is None:
                raise ValueError
            return value.number
        if t in (f.TYPE_DOUBLE, f.TYPE_FLOAT):
            return float(text)
        if t in (f.TYPE_STRING,):
            return text
        if t == f.TYPE_BYTES:
            return text.encode()
        number = int(text)
    except ValueError:
        if t == f.TYPE_ENUM:
            assert enum is not None
            kind = "one of " + ", ".join(v.name for v in enum.values)
        else:
            kind = "true or false" if t == f.TYPE_BOOL else "a number"
        raise _bad(f"{where}: {text!r} is not {kind}") from None
    return _in_range(number, _INT_RANGES[t], where)


def _in_range(number: int, bounds: tuple[int, int], where: str) -> int:
    """`number`, or a 400 naming the field (protobuf's setattr raised ValueError: a 500)."""
    low, high = bounds
    if not low <= number <= high:
        raise _bad(f"{where}: {number} is out of range ({low} to {high})")
    return number


_D = _descriptor.FieldDescriptor
_INT_RANGES: dict[int, tuple[int, int]] = {
    **dict.fromkeys((_D.TYPE_INT32, _D.TYPE_SINT32, _D.TYPE_SFIXED32), (-(2**31), 2**31 - 1)),
    **dict.fromkeys((_D.TYPE_UINT32, _D.TYPE_FIXED32), (0, 2**32 - 1)),
    **dict.fromkeys((_D.TYPE_INT64, _D.TYPE_SINT64, _D.TYPE_SFIXED64), (-(2**63), 2**63 - 1)),
    **dict.fromkeys((_D.TYPE_UINT64, _D.TYPE_FIXED64), (0, 2**64 - 1)),
}


def _enum_prefix(enum: AnyEnumDescriptor) -> str:
    """CONSISTENCY_ for Consistency: ?consistency=stale works as well as CONSISTENCY_STALE."""
    first = enum.values[0].name
    return first[: first.rfind("_UNSPECIFIED") + 1] if "_UNSPECIFIED" in first else ""


def set_field(msg: Message, path: str, text: str, *, where: str | None = None) -> None:
    """Set the field at dotted `path` of `msg` from a string (query and path parameters).
    A repeated message field on the way gets one element (the first)."""
    where = where or path
    parts = path.split(".")
    for i, name in enumerate(parts):
        f = _field(msg.DESCRIPTOR, name)
        if f is None:
            raise _bad(f"{where}: {msg.DESCRIPTOR.name} has no field {name!r}")
        last = i == len(parts) - 1
        repeated = f.is_repeated
        if f.type == f.TYPE_MESSAGE:
            if last:
                raise _bad(f"{where}: is a message; set its fields ({path}.<field>)")
            container = getattr(msg, f.name)
            if repeated:
                msg = container[0] if len(container) else container.add()
            else:
                msg = container
            continue
        if not last:
            raise _bad(f"{where}: {name!r} is not a message")
        value = _scalar(f, text, where)
        if repeated:
            getattr(msg, f.name).append(value)
        else:
            setattr(msg, f.name, value)


def _has_request_id(cls: type[Message]) -> bool:
    return "request_id" in cls.DESCRIPTOR.fields_by_name


def parse_body(raw: bytes, *, max_containers: int) -> Any:
    """The JSON of a request body, within a parse budget: at most `max_containers` arrays and
    objects (counted in the bytes first, strings included: an upper bound, never an under-
    count), nested no deeper than the interpreter allows (RecursionError was a 500)."""
    containers = raw.count(b"[") + raw.count(b"{")
    if containers > max_containers:
        raise _bad(f"body: holds up to {containers} JSON arrays and objects, more than the "
                   f"{max_containers} a request may (http_max_json_containers)")
    try:
        return json.loads(raw)
    except RecursionError:
        raise _bad("body: JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(f"body: not valid JSON ({exc})") from None


async def build_request(route: Route, request: web.Request, *,
                        max_json_containers: int = 100_000) -> Message:
    """The RPC's request message for this HTTP request (Problem 400 when it cannot be).
    Call it only once the caller is authenticated: it reads and parses the body."""
    cls = route.request_type()
    assert cls is not None, f"{route.path}: not an RPC route"
    data: dict[str, Any] = {}
    raw = await request.read() if route.body else b""
    if raw.strip():
        parsed = parse_body(raw, max_containers=max_json_containers)
        if not isinstance(parsed, dict):
            raise _bad(f"body: must be a JSON object (a {cls.DESCRIPTOR.full_name})")
        data = parsed
    if route.update_mask:
        for key in UPDATE_MASK_FIELDS:
            if key in data:
                request[UPDATE_MASK_KEY] = data.pop(key)
    data = jsonbytes.request_in(cls.DESCRIPTOR, data)
    try:
        msg: Any = json_format.ParseDict(data, cls())  # Any: the route's own request type
    except json_format.ParseError as exc:
        raise _bad(f"body: {exc}") from None
    for key, value in request.query.items():
        if route.body:
            raise _bad(f"{key}: query parameters are not read on this route; put fields in "
                       "the JSON body")
        if key in ("request_id", "requestId"):
            raise _bad(f"{key}: send the {IDEMPOTENCY_HEADER} header instead")
        set_field(msg, route.query_aliases.get(key, key), value, where=key)
    for param, path in route.path_fields.items():
        set_field(msg, path, request.match_info[param], where=param)
    idempotency_key = request.headers.get(IDEMPOTENCY_HEADER)
    if idempotency_key is not None:
        if not _has_request_id(cls):
            raise _bad(f"{IDEMPOTENCY_HEADER}: {route.method} {route.path} is not a write")
        if msg.request_id and msg.request_id != idempotency_key:
            raise _bad(f"request_id: the body says {msg.request_id!r}, the "
                       f"{IDEMPOTENCY_HEADER} header {idempotency_key!r}; send one")
        msg.request_id = idempotency_key
    return msg


def to_json(msg: Message) -> dict:
    """Canonical proto JSON, fields at their default value included (the dashboard and
    clients see every field the message has), bytes fields as JSON (jsonbytes.py)."""
    return jsonbytes.answer_out(
        msg.DESCRIPTOR, json_format.MessageToDict(msg, always_print_fields_with_no_presence=True))

