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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from aiohttp import web
from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format
from google.protobuf.message import Message

from gnomon.node.api.grpc.errors import LEADER_METADATA_KEY, REASON_METADATA_KEY
from gnomon.node.api.http import jsonbytes
from gnomon.node.api.http.problems import Problem
from gnomon.node.security.admission import RETRY_AFTER_KEY
from gnomon.v1 import api_pb2, worker_pb2

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
    layer itself (events, the OpenAPI document)."""

    method: str
    path: str
    rpc: str
    summary: str
    # path parameter -> field of the request message it sets (dotted)
    path_fields: dict[str, str] = field(default_factory=dict)
    # the request message's JSON is the body (writes); otherwise query parameters set fields
    body: bool = False
    # fields the route itself sets (dotted path -> JSON value)
    fixed: dict[str, object] = field(default_factory=dict)
    status: int = 200
    # the body also carries `updateMask` (JobSpec paths): patch.py merges onto the job
    update_mask: bool = False
    # short query parameter names -> the request field they set (`?job=` for job_id)
    query_aliases: dict[str, str] = field(default_factory=dict)

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


_JOB = {"job_id": "job.job_id"}

ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/cluster", "ClusterService.GetStatus",
          "This node's status and, as far as it knows, the cluster's"),
    Route("POST", "/v1/cluster/limits", "ClusterService.SetLimits",
          "Change the replicated limits", body=True),
    Route("GET", "/v1/jobs", "JobService.ListJobs", "List jobs (every tenant, or ?tenant=)"),
    Route("POST", "/v1/jobs", "JobService.CreateJob", "Create a job", body=True, status=201),
    Route("GET", "/v1/jobs/{job_id}", "JobService.GetJob", "Get a job", _JOB),
    Route("PUT", "/v1/jobs/{job_id}", "JobService.UpdateJob",
          "Replace a job's spec (expectedVersion for optimistic concurrency)", _JOB, body=True),
    Route("PATCH", "/v1/jobs/{job_id}", "JobService.UpdateJob",
          "Change the spec fields updateMask names, keep the others (conditional on the "
          "version merged onto unless expectedVersion is given)", _JOB, body=True,
          update_mask=True),
    Route("DELETE", "/v1/jobs/{job_id}", "JobService.DeleteJob", "Delete a job", _JOB),
    Route("POST", "/v1/jobs/{job_id}/pause", "JobService.PauseJob", "Pause a job", _JOB,
          body=True),
    Route("POST", "/v1/jobs/{job_id}/resume", "JobService.ResumeJob", "Resume a job", _JOB,
          body=True),
    Route("POST", "/v1/jobs/{job_id}/trigger", "JobService.TriggerJob",
          "Start a run now, outside the schedule", _JOB, body=True),
    Route("GET", "/v1/jobs/{job_id}/runs", "JobService.ListRuns", "A job's runs, newest first",
          _JOB),
    Route("POST", "/v1/jobs/{job_id}/circuit/reset", "JobService.ResetCircuit",
          "Close a job's circuit breaker by hand", _JOB, body=True),
    Route("POST", "/v1/jobs/{job_id}/backfill", "JobService.BackfillJob",
          "Run the slots of [fromMs, toMs) that have not run (trigger backfill, paced)", _JOB,
          body=True),
    Route("POST", "/v1/jobs/{job_id}/backfill/cancel", "JobService.CancelBackfill",
          "Stop a job's running backfill", _JOB, body=True),
    Route("GET", "/v1/queue-circuits", "JobService.ListQueueCircuits",
          "The queues' circuit breakers (?tenant=)"),
    Route("POST", "/v1/tenants/{tenant}/queues/{queue}/circuit", "JobService.SetQueueCircuit",
          "Give a queue a circuit breaker, replace its rule, or remove it (no breaker)",
          {"tenant": "tenant", "queue": "queue"}, body=True),
    Route("GET", "/v1/jobs/{job_id}/schedule/preview", "JobService.PreviewSchedule",
          "The next instants a job fires at (?count=, ?after_ms=)", _JOB),
    Route("POST", "/v1/schedules/preview", "JobService.PreviewSchedule",
          "The next instants a schedule would fire at (validated as CreateJob would)",
          body=True),
    Route("GET", "/v1/tenants/{tenant}/jobs", "JobService.ListJobs", "A tenant's jobs",
          {"tenant": "tenant"}),
    Route("GET", "/v1/tenants/{tenant}/jobs/{name}", "JobService.GetJob",
          "Get a job by tenant and name", {"tenant": "job.tenant", "name": "job.name"}),
    Route("GET", "/v1/runs", "JobService.ListRunsAcrossJobs",
          "Runs across jobs in memory, filtered (?tenant=, job=, queue=, state=, trigger=, "
          "since=, until=, late=1, errors=1), sorted (?sort=), paged (?limit=, page_token=)",
          query_aliases={"job": "job_id", "since": "since_ms", "until": "until_ms"}),
    Route("GET", "/v1/runs/{run_id}", "JobService.GetRun", "Get a run with its tasks",
          {"run_id": "run_id"}),
    Route("GET", "/v1/runs/{run_id}/waits", "JobService.ExplainRun",
          "What a run and its tasks wait for, with each bound and where to change it",
          {"run_id": "run_id"}),
    Route("POST", "/v1/runs/{run_id}/cancel", "JobService.CancelRun",
          "Cancel every unfinished task of a run", {"run_id": "run_id"}, body=True),
    Route("POST", "/v1/runs/{run_id}/rerun", "JobService.RerunRun",
          "Run a run's dead, cancelled and upstream-failed tasks again", {"run_id": "run_id"},
          body=True),
    Route("POST", "/v1/runs/{run_id}/tasks/{task_name}/retry", "JobService.RetryTask",
          "Run one dead, cancelled or upstream-failed task again (and those it blocks)",
          {"run_id": "run_id", "task_name": "task_name"}, body=True),
    Route("POST", "/v1/runs/{run_id}/tasks/{task_name}/cancel", "JobService.CancelTask",
          "Cancel one live task (its pending dependents become upstream_failed)",
          {"run_id": "run_id", "task_name": "task_name"}, body=True),
    Route("GET", "/v1/dlq", "JobService.ListDeadLetters", "The dead-letter queue"),
    Route("GET", "/v1/tenants/{tenant}/dlq", "JobService.ListDeadLetters",
          "A tenant's dead letters", {"tenant": "tenant"}),
    Route("POST", "/v1/dlq/replay", "JobService.ReplayDeadLetters",
          "Replay dead letters (tasks, a tenant's, or all)", body=True),
    Route("POST", "/v1/dlq/discard", "JobService.DiscardDeadLetters",
          "Drop dead letters for good (their tasks stay dead), with a reason", body=True),
    Route("GET", "/v1/whoami", "AccessService.WhoAmI", "The principal of this request's token"),
    Route("GET", "/v1/tokens", "AccessService.ListTokens", "API tokens (never their secrets)"),
    Route("POST", "/v1/tokens", "AccessService.CreateToken",
          "Create a token; the answer carries its secret, once", body=True),
    Route("POST", "/v1/tokens/{token_id}/revoke", "AccessService.RevokeToken",
          "Revoke a token", {"token_id": "token_id"}, body=True),
    Route("GET", "/v1/tenants", "AccessService.ListTenants", "Tenants and their limits"),
    Route("POST", "/v1/tenants", "AccessService.CreateTenant", "Create a tenant", body=True),
    Route("GET", "/v1/tenants/{tenant}", "AccessService.GetTenant", "Get a tenant",
          {"tenant": "name"}),
    Route("PUT", "/v1/tenants/{tenant}", "AccessService.UpdateTenant",
          "Change a tenant's weight and limits", {"tenant": "tenant.name"}, body=True),
    Route("GET", "/v1/audit", "AccessService.ListAudit",
          "The audit log of administrative calls, newest first"),
    Route("GET", "/v1/queues", "OperationsService.ListQueues",
          "Queues: ready backlog, oldest ready age, leased tasks, the workers serving them"),
    Route("GET", "/v1/workers", "OperationsService.ListWorkers",
          "Workers connected to the leader: queues, credits, leases held"),
    Route("GET", "/v1/active-runs", "OperationsService.ListActiveRuns",
          "Runs still running, oldest first"),
    Route("POST", "/v1/cluster/transfer-leadership", "OperationsService.TransferLeadership",
          "Hand leadership to another node", body=True),
    Route("POST", "/v1/worker/lease", "WorkerService.LeaseTasks",
          "A worker without a stream: wait up to waitMs for up to capacity tasks of its "
          "queues, each under a lease", body=True),
    Route("POST", "/v1/worker/heartbeat", "WorkerService.RenewLeases",
          "Renew a worker's leases: each is ok, revoked or cancel", body=True),
    Route("POST", "/v1/worker/complete", "WorkerService.CompleteLease",
          "Report a lease's task done (accepted, or the reason it was not)", body=True),
    Route("POST", "/v1/worker/fail", "WorkerService.FailLease",
          "Report a lease's task failed (retryable or not)", body=True),
    Route("GET", "/v1/events", "", "Server-sent events: runs and jobs that changed, "
          "cluster role changes"),
    Route("GET", "/v1/openapi.json", "", "This document"),
)


# Services whose every unary RPC is also served at POST /v1/rpc/<Service>/<Method> (the request
# message's JSON as the body): an RPC is on HTTP the moment it lands, named route or not.
SERVED_SERVICES = ("JobService", "ClusterService", "OperationsService", "AccessService")


def rpc_routes() -> tuple[Route, ...]:
    out = []
    for name in SERVED_SERVICES:
        service = api_pb2.DESCRIPTOR.services_by_name.get(name)
        for m in service.methods if service else ():
            if m.client_streaming or m.server_streaming:
                continue
            out.append(Route("POST", f"/v1/rpc/{name}/{m.name}", f"{name}.{m.name}",
                             f"{name}.{m.name}: the request message's JSON as the body",
                             body=True))
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
        if md.get(RETRY_AFTER_KEY, "").isdigit():  # admission control: "retry-after-ms"
            headers["Retry-After"] = str(max(1, -(-int(md[RETRY_AFTER_KEY]) // 1000)))
        raise Problem(code, details, reason=md.get(REASON_METADATA_KEY, ""),
                      leader=md.get(LEADER_METADATA_KEY, ""), headers=headers)


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
                return int(text)
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
        return int(text)
    except ValueError:
        if t == f.TYPE_ENUM:
            assert enum is not None
            kind = "one of " + ", ".join(v.name for v in enum.values)
        else:
            kind = "true or false" if t == f.TYPE_BOOL else "a number"
        raise _bad(f"{where}: {text!r} is not {kind}") from None


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
    for path, fixed in route.fixed.items():
        set_field(msg, path, str(fixed))
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

