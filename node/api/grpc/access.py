"""The access guard (authentication + authorization of every call) and AccessService.

`AccessGuard` is a server interceptor: it authenticates from the call's metadata and wraps
the method's behaviour so that the RULES entry for the method checks the decoded request
before the servicer runs; a refused call ends with UNAUTHENTICATED or PERMISSION_DENIED and
changes nothing. The principal reaches the servicer through `current_principal()`.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import hashlib
import inspect
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format

from gnomon.node import codec
from gnomon.node.api.grpc.base import ServicerBase, translated
from gnomon.node.api.grpc.errors import ServiceError, check
from gnomon.node.api.grpc.handlers import behaviour as handler_behaviour
from gnomon.node.api.grpc.handlers import rebuild
from gnomon.node.core.access import (
    ADMIN,
    GATEWAY,
    TENANT_ADMIN,
    TENANT_READER,
    TENANT_WRITER,
    WORKER,
    CreateToken,
    RecordAudit,
    RevokeToken,
    SetTenant,
    TenantReply,
    TokenReply,
    check_tenant,
    check_token_fields,
)
from gnomon.node.core.model import State
from gnomon.node.raft.errors import NotCommitted, Overloaded
from gnomon.node.security.admission import RETRY_AFTER_KEY, RateLimiter
from gnomon.node.security.auth import (
    DEFAULT_TENANT,
    MISSING,
    Authenticator,
    AuthError,
    MissingCredentials,
    Principal,
    denied,
    secret_hash,
)
from gnomon.node.spec.validate import validate_request_id
from gnomon.v1 import api_pb2, api_pb2_grpc, types_pb2

__all__ = ["RULES", "AccessGuard", "AccessServicer", "current_principal", "request_scope",
           "scoped", "set_principal"]

log = logging.getLogger(__name__)

_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "gnomon_principal", default=None)
# The RPC being served ("JobService.CreateJob"), set with the principal.
_METHOD: contextvars.ContextVar[str] = contextvars.ContextVar("gnomon_method", default="")
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
SECRET_BYTES = 32


def set_principal(principal: Principal, method: str = "") -> None:
    """Run the rest of this context as `principal` calling `method` (a path
    "/gnomon.v1.JobService/CreateJob" or "JobService.CreateJob"; the guard's job; tests that
    call a servicer directly use it)."""
    _PRINCIPAL.set(principal)
    _METHOD.set(_rpc_name(method))


def _rpc_name(method: str) -> str:
    """"/gnomon.v1.JobService/CreateJob" -> "JobService.CreateJob"."""
    return method.strip("/").replace("gnomon.v1.", "").replace("/", ".")


def current_principal() -> Principal:
    """The principal of the call being served (the guard set it)."""
    principal = _PRINCIPAL.get()
    if principal is None:  # pragma: no cover - every gnomon method goes through the guard
        raise RuntimeError("no principal: the call did not pass the access guard")
    return principal


def request_scope() -> str:
    """The scope of the request ids of the call being served: who calls (the token id;
    "admin" for the bootstrap token, "anonymous" without authentication), through which RPC,
    for which tenants (the token's; "*" for an admin), as "<principal>/<RPC>/<tenants>".

    Apply remembers a request id per scope (node/core/DESIGN.md, "Request ids"), so a key
    another caller chose is never answered with that caller's result. Only stable facts of
    the caller go in (never the tenant of a job looked up in the state, which a delete
    changes), so a retry of the same request has the same scope."""
    principal = current_principal()
    method = _METHOD.get()
    if not method:  # pragma: no cover - the guard sets both
        raise RuntimeError("no method: the call did not pass the access guard")
    who = principal.token_id or principal.name
    tenants = "*" if principal.is_admin else ",".join(principal.tenants)
    return f"{who}/{method}/{tenants}"


def request_fingerprint(request) -> bytes:
    """SHA-256 of `request` (a request message) without its request_id: what a retry must
    repeat. The request's own bytes, so the leader's inputs (now, the first slot) and the
    state do not enter: the same request always has the same fingerprint, whichever port
    or node it came through."""
    request_id = request.request_id
    request.request_id = ""
    try:
        data = request.SerializeToString(deterministic=True)
    finally:
        request.request_id = request_id
    return hashlib.sha256(data).digest()


def scoped(command, request):
    """`command` with the scope of this call's request id and the fingerprint of `request`
    (a command without a request id needs neither: it is not deduplicated)."""
    if not getattr(command, "request_id", ""):
        return command
    return dataclasses.replace(command, request_scope=request_scope(),
                               request_fingerprint=request_fingerprint(request))


class Lookup:
    """Tenants of the jobs and runs a request names (the replicated state, under its lock)."""

    def __init__(self, node) -> None:
        self._node = node

    def job(self, ref: api_pb2.JobRef) -> str:
        if not ref.job_id:
            return ref.tenant or DEFAULT_TENANT
        # Unknown job: the servicer answers NOT_FOUND; only admins learn that.
        return self._node.replica.read(
            lambda st: job.spec.tenant if (job := st.jobs.get(ref.job_id)) else "")

    def run(self, run_id: str) -> str:
        return self._node.replica.read(lambda st: _run_tenant(st, run_id))

    def runs(self, run_ids: list[str]) -> set[str]:
        """The tenants of several runs, in one read."""
        return self._node.replica.read(lambda st: {_run_tenant(st, r) for r in run_ids})


def _run_tenant(st: State, run_id: str) -> str:
    run = st.runs.get(run_id)
    if run is not None:
        return run.spec.tenant
    job = st.jobs.get(run_id.partition("@")[0])
    return job.spec.tenant if job is not None else ""


def _listing(principal: Principal, request, _lookup: Lookup) -> list[str]:
    """A list call: its tenant, or the principal's only tenant filled in."""
    if request.tenant:
        return [request.tenant]
    if len(principal.tenants) == 1:
        request.tenant = principal.tenants[0]
        return list(principal.tenants)
    raise denied(f"tenant: required (this token acts for {', '.join(principal.tenants)})")


def _tenants_listing(principal: Principal, request, _lookup: Lookup) -> list[str]:
    """A list call over several tenants (ListRunsAcrossJobs): the tenants it names, or every
    tenant of the token filled in, so a tenant's token never lists another tenant's runs."""
    if not request.tenant and not principal.is_admin:
        if not principal.tenants:
            raise denied("tenant: this token acts for no tenant")
        request.tenant.extend(principal.tenants)
    return list(request.tenant)


@dataclass(frozen=True)
class Rule:
    """What a method needs: a role, and the tenants of the request (None: cluster-wide)."""

    role: str
    # The request is the method's own message type (Any: one rule type serves every method).
    tenants: Callable[[Principal, Any, Lookup], list[str]] | None = None

    def check(self, principal: Principal, request, lookup: Lookup) -> None:
        if principal.is_admin:
            return
        principal.require(self.role)
        if self.tenants is None:
            raise denied("role: this call needs admin")
        principal.require(self.role, self.tenants(principal, request, lookup))


def _job(p, r, look):
    return [look.job(r.job)]


def _spec(p, r, look):
    return [r.spec.tenant or DEFAULT_TENANT]


def _specs(p, r, look):
    return sorted({s.tenant or DEFAULT_TENANT for s in r.specs}) or [DEFAULT_TENANT]


def _update(p, r, look):
    return [look.job(r.job), r.spec.tenant or DEFAULT_TENANT]


def _run(p, r, look):
    return [look.run(r.run_id)]


def _replay(p, r, look):
    return _tasks(p, r, look) if r.tasks else _listing(p, r, look)


def _tasks(p, r, look):
    """The tenants of the runs of the tasks named (none named: refused by the servicer), read
    at once; more than MAX_NAMED_TASKS are refused before any is looked up."""
    if len(r.tasks) > MAX_NAMED_TASKS:
        raise AuthError("INVALID_ARGUMENT", f"tasks: {len(r.tasks)} named; at most "
                                            f"{MAX_NAMED_TASKS} in one call")
    return sorted(look.runs([t.run_id for t in r.tasks]))


def _preview(p, r, look):
    return [look.job(r.job)] if r.HasField("job") else [r.tenant or DEFAULT_TENANT]


def _queue_tenant(p, r, look):
    return [r.tenant or DEFAULT_TENANT]


def _job_or_queue(p, r, look):
    """ResetCircuit: a job's breaker, or (tenant and queue set) a queue's."""
    return _queue_tenant(p, r, look) if r.queue or r.tenant else _job(p, r, look)


def _any(p, r, look):
    return []


JOBS, CLUSTER, OPS, ACCESS = ("/gnomon.v1.JobService/", "/gnomon.v1.ClusterService/",
                              "/gnomon.v1.OperationsService/", "/gnomon.v1.AccessService/")
RULES: dict[str, Rule] = {
    JOBS + "CreateJob": Rule(TENANT_WRITER, _spec),
    # Every tenant of the specs; one call counts once against each one's api_rate_per_s.
    JOBS + "CreateJobs": Rule(TENANT_WRITER, _specs),
    JOBS + "GetJob": Rule(TENANT_READER, _job),
    JOBS + "ListJobs": Rule(TENANT_READER, _listing),
    JOBS + "UpdateJob": Rule(TENANT_WRITER, _update),
    JOBS + "DeleteJob": Rule(TENANT_ADMIN, _job),
    JOBS + "PauseJob": Rule(TENANT_WRITER, _job),
    JOBS + "ResumeJob": Rule(TENANT_WRITER, _job),
    JOBS + "TriggerJob": Rule(TENANT_WRITER, _job),
    JOBS + "GetRun": Rule(TENANT_READER, _run),
    JOBS + "ListRuns": Rule(TENANT_READER, _job),
    JOBS + "ListRunsAcrossJobs": Rule(TENANT_READER, _tenants_listing),
    JOBS + "CancelRun": Rule(TENANT_WRITER, _run),
    JOBS + "ListDeadLetters": Rule(TENANT_READER, _listing),
    JOBS + "ReplayDeadLetters": Rule(TENANT_WRITER, _replay),
    JOBS + "DiscardDeadLetters": Rule(TENANT_WRITER, _tasks),
    JOBS + "PreviewSchedule": Rule(TENANT_READER, _preview),
    JOBS + "RerunRun": Rule(TENANT_WRITER, _run),
    JOBS + "CancelTask": Rule(TENANT_WRITER, _run),
    JOBS + "RetryTask": Rule(TENANT_WRITER, _run),
    JOBS + "ResetCircuit": Rule(TENANT_WRITER, _job_or_queue),
    JOBS + "BackfillJob": Rule(TENANT_WRITER, _job),
    JOBS + "CancelBackfill": Rule(TENANT_WRITER, _job),
    JOBS + "SetQueueCircuit": Rule(TENANT_ADMIN, _queue_tenant),
    JOBS + "ListQueueCircuits": Rule(TENANT_READER, _listing),
    JOBS + "ExplainRun": Rule(TENANT_READER, _run),
    CLUSTER + "GetStatus": Rule(TENANT_READER, _any),
    CLUSTER + "SetLimits": Rule(ADMIN),
    CLUSTER + "ExportHistory": Rule(ADMIN),
    OPS + "ListActiveRuns": Rule(TENANT_READER, _listing),
    OPS + "AddNode": Rule(ADMIN),
    OPS + "RemoveNode": Rule(ADMIN),
    ACCESS + "WhoAmI": Rule(TENANT_READER, _any),
    ACCESS + "CreateToken": Rule(TENANT_ADMIN, _any),  # AccessServicer checks the scope
    ACCESS + "ListTokens": Rule(TENANT_ADMIN, _any),
    ACCESS + "RevokeToken": Rule(TENANT_ADMIN, _any),
    ACCESS + "CreateTenant": Rule(ADMIN),
    ACCESS + "UpdateTenant": Rule(ADMIN),
    ACCESS + "GetTenant": Rule(TENANT_READER, lambda p, r, look: [r.name]),
    ACCESS + "ListTenants": Rule(TENANT_READER, _any),  # filtered to the caller's tenants
    ACCESS + "ListAudit": Rule(ADMIN),
    "/gnomon.v1.WorkerService/Connect": Rule(WORKER, _any),
    # Without a stream (worker_poll.py): a tenant's worker gets and reports only its token's
    # leases (the servicer scopes the worker id and checks the holder).
    "/gnomon.v1.WorkerService/LeaseTasks": Rule(WORKER, _any),
    "/gnomon.v1.WorkerService/RenewLeases": Rule(WORKER, _any),
    "/gnomon.v1.WorkerService/CompleteLease": Rule(WORKER, _any),
    "/gnomon.v1.WorkerService/FailLease": Rule(WORKER, _any),
    # A gateway's relay (relay.py): the call needs a gateway (or admin) token before a frame
    # is read; each stream it carries is authenticated with its own worker's metadata.
    "/gnomon.v1.GatewayService/Relay": Rule(GATEWAY, _any),
}
# Administrative calls: recorded in the audit log when they succeed.
AUDITED = frozenset({
    ACCESS + "CreateToken", ACCESS + "RevokeToken", ACCESS + "CreateTenant",
    ACCESS + "UpdateTenant", CLUSTER + "SetLimits", OPS + "TransferLeadership",
    OPS + "AddNode", OPS + "RemoveNode", OPS + "DrainWorker",
    JOBS + "DeleteJob", JOBS + "ReplayDeadLetters", JOBS + "DiscardDeadLetters",
})
MAX_AUDIT_DETAIL_CHARS = 2000
# Dead letters one ReplayDeadLetters or DiscardDeadLetters may name (each is looked up for its
# tenant before the call is admitted).
MAX_NAMED_TASKS = 1000
# Calls that create runs: refused while the tenant's queued tasks are at max_queued_tasks.
RUN_CREATING = frozenset({JOBS + "TriggerJob", JOBS + "ReplayDeadLetters", JOBS + "BackfillJob"})
QUEUED_RETRY_MS = 1000
MAX_AUDIT_LIST = 1000
# Any role but gateway may ask who it is and read cluster status; workers are no
# tenant-reader otherwise. A gateway's token opens its relay and nothing else.
_ANY_ROLE = {ACCESS + "WhoAmI", CLUSTER + "GetStatus"}
_ADMIN_ONLY = Rule(ADMIN)


def _check(method: str, principal: Principal, request, lookup: Lookup) -> None:
    if method in _ANY_ROLE and principal.role != GATEWAY:
        return
    RULES.get(method, _ADMIN_ONLY).check(principal, request, lookup)


def _active_runs(state, tenant: str) -> int:
    """Runs of `tenant` running now (over the jobs that have any: bounded by active runs)."""
    return sum(len(runs) for job_id, runs in state.running_by_job.items()
               if (job := state.jobs.get(job_id)) is not None and job.spec.tenant == tenant)


def _request_tenants(method: str, principal: Principal, request, lookup: Lookup) -> list[str]:
    """The tenants a call acts for (for admission control; admins' calls count too)."""
    rule = RULES.get(method)
    if rule is None or rule.tenants is None or request is None:
        return []
    try:
        return rule.tenants(principal, request, lookup)
    except AuthError:  # a list call of an admin without a tenant: every tenant, none charged
        return []


class AccessGuard(grpc.aio.ServerInterceptor):
    """Authenticates every call to a gnomon service, checks RULES on its request and the
    rate limits of the tenants it acts for."""

    def __init__(self, node, authenticator: Authenticator):
        self._authenticator = authenticator
        self._lookup = Lookup(node)
        self._node = node
        self._limiter = RateLimiter()

    async def audit(self, principal: Principal, method: str, request) -> None:
        """Record a successful administrative call in the audit log (a committed command;
        best effort: a call that succeeded is not failed for its audit entry).

        Awaited before the call answers: once a caller has its answer, the entry is committed
        and nothing of that call is still in flight (a client that reads the cluster's state
        next sees all that its call changed).
        """
        detail = json_format.MessageToJson(request, indent=None, sort_keys=True)
        if len(detail) > MAX_AUDIT_DETAIL_CHARS:
            detail = detail[:MAX_AUDIT_DETAIL_CHARS] + "..."
        cmd = RecordAudit(principal.describe(), _rpc_name(method), detail)
        try:
            await self._node.proposer.propose(cmd)
        except (NotCommitted, Overloaded) as exc:
            log.warning("audit entry not recorded (%s): %s %s", exc, cmd.actor, cmd.action)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_SERVICES):
            return handler
        try:
            with self._node.replica.lock:
                principal = self._authenticator.authenticate(
                    handler_call_details.invocation_metadata)
        except MissingCredentials:
            principal = None  # perhaps its client certificate says: known only in the call
        except AuthError as exc:
            return _refusing(handler, exc)
        return _wrapped(handler, method, principal, self)

    def authenticate_relayed(self, metadata, method: str) -> Principal:
        """The principal of a stream a gateway relays, from the stream's own metadata (no
        client certificate: the gateway terminated TLS), checked against `method`'s rule.
        Raises AuthError."""
        with self._node.replica.lock:
            principal = self._authenticator.authenticate(metadata)
        _check(method, principal, None, self._lookup)
        return principal

    async def principal_of(self, principal: Principal | None, context) -> Principal:
        """`principal`, or the one the call's verified client certificate stands for."""
        if principal is not None:
            return principal
        subject = _peer_common_name(context)
        try:
            if subject is None:
                raise MissingCredentials("UNAUTHENTICATED", MISSING)
            with self._node.replica.lock:
                return self._authenticator.authenticate_subject(subject)
        except AuthError as exc:
            await _abort(context, exc)
            raise  # pragma: no cover - abort raises


def _peer_common_name(context) -> str | None:
    """The common name of the client certificate gRPC verified (mutual TLS), if any."""
    try:
        auth = context.auth_context() or {}
    except Exception:  # noqa: BLE001 - not a TLS call (HTTP, or a plaintext port)
        return None
    names = auth.get("x509_common_name") or []
    return names[0].decode() if names else None


async def _abort(context, exc: AuthError) -> None:
    await context.abort(getattr(grpc.StatusCode, exc.code), str(exc))


def _refusing(handler: grpc.RpcMethodHandler, exc: AuthError) -> grpc.RpcMethodHandler:
    if handler.response_streaming:
        async def refuse_stream(request_or_iterator, context):
            await _abort(context, exc)
            yield  # pragma: no cover - abort raises

        return rebuild(handler, refuse_stream)

    async def refuse(request_or_iterator, context):
        await _abort(context, exc)

    return rebuild(handler, refuse)


def _wrapped(handler, method: str, principal: Principal | None, guard: AccessGuard):
    lookup = guard._lookup
    behaviour = handler_behaviour(handler)
    if handler.request_streaming:
        # The worker stream: the role is checked now; its queues by the worker servicer.
        async def admit_stream(context) -> None:
            who = await guard.principal_of(principal, context)
            try:
                _check(method, who, None, lookup)
            except AuthError as exc:
                await _abort(context, exc)
            set_principal(who, method)

        if inspect.isasyncgenfunction(behaviour):
            async def streaming(requests, context):
                await admit_stream(context)
                async for response in behaviour(requests, context):
                    yield response

            return rebuild(handler, streaming)

        async def writing(requests, context):
            # The worker stream writes with context.write and returns nothing: so must we.
            await admit_stream(context)
            return await behaviour(requests, context)

        return rebuild(handler, writing)

    if inspect.isasyncgenfunction(behaviour):
        async def unary_stream(request, context):
            who = await guard.principal_of(principal, context)
            await _authorize(method, who, request, guard, context)
            async for response in behaviour(request, context):
                yield response

        return rebuild(handler, unary_stream)

    async def unary(request, context):
        who = await guard.principal_of(principal, context)
        await _authorize(method, who, request, guard, context)
        response = await behaviour(request, context)
        if method in AUDITED:
            await guard.audit(who, method, request)
        return response

    return rebuild(handler, unary)


async def _authorize(method, principal, request, guard: AccessGuard, context) -> None:
    if _is_malformed(request):  # the decode guard answers for those
        return
    try:
        _check(method, principal, request, guard._lookup)
    except AuthError as exc:
        await _abort(context, exc)
    await _admit(method, principal, request, guard, context)
    set_principal(principal, method)


async def _admit(method, principal, request, guard: AccessGuard, context) -> None:
    if not guard._node.replica.state.access.tenants:  # racy read: no tenant, no limits
        return
    tenants = _request_tenants(method, principal, request, guard._lookup)
    if not tenants:
        return
    def bounds(st: State) -> tuple[list, list, list]:
        records = st.access.tenants
        creating = method in RUN_CREATING
        return ([(t, records[t]) for t in tenants if t in records and records[t].api_rate_per_s],
                [(t, records[t].max_queued_tasks) for t in tenants
                 if creating and t in records and records[t].max_queued_tasks],
                [(t, records[t].max_active_runs, _active_runs(st, t)) for t in tenants
                 if creating and t in records and records[t].max_active_runs])

    limits, queued, running = guard._node.replica.read(bounds)
    for tenant, bound, active in running:
        if active >= bound:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"tenant: {tenant!r} has {active} runs running (max_active_runs {bound}); "
                f"retry after {QUEUED_RETRY_MS} ms",
                trailing_metadata=((RETRY_AFTER_KEY, str(QUEUED_RETRY_MS)),))
    for tenant, bound in queued:
        waiting = guard._node.dispatcher.ready_count(tenant)
        if waiting >= bound:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"tenant: {tenant!r} has {waiting} tasks waiting for a worker (max_queued_tasks "
                f"{bound}); retry after {QUEUED_RETRY_MS} ms",
                trailing_metadata=((RETRY_AFTER_KEY, str(QUEUED_RETRY_MS)),))
    for tenant, record in limits:
        wait_ms = guard._limiter.take(tenant, record.api_rate_per_s, record.api_burst)
        if wait_ms:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"tenant: {tenant!r} is over its api_rate_per_s ({record.api_rate_per_s}); "
                f"retry after {wait_ms} ms",
                trailing_metadata=((RETRY_AFTER_KEY, str(wait_ms)),))


def _is_malformed(request) -> bool:
    return type(request).__name__ == "Malformed"


# -- AccessService ----------------------------------------------------------------------------

_GRANTABLE_BY_TENANT_ADMIN = (TENANT_WRITER, TENANT_READER, WORKER)


class AccessServicer(ServicerBase, api_pb2_grpc.AccessServiceServicer):
    def __init__(self, node, authenticator: Authenticator):
        super().__init__(node)
        self._auth = authenticator

    @translated
    async def WhoAmI(self, request, context):  # noqa: N802
        p = current_principal()
        return api_pb2.WhoAmIResponse(name=p.name, role=p.role, tenants=p.tenants,
                                      token_id=p.token_id,
                                      authentication_required=self._auth.enabled)

    @translated
    async def CreateToken(self, request, context):  # noqa: N802
        p = current_principal()
        validate_request_id(request.request_id)
        tenants = tuple(request.tenants)
        rejected = check_token_fields(request.name, request.role, tenants, request.expires_ms)
        if rejected:
            check(rejected)
        if not p.is_admin:
            if request.role not in _GRANTABLE_BY_TENANT_ADMIN:
                raise denied(f"role: a {p.role} may create {', '.join(_GRANTABLE_BY_TENANT_ADMIN)}"
                             f" tokens, not {request.role}")
            p.require(TENANT_ADMIN, tenants)
        self.require_leader()
        secret = secrets.token_urlsafe(SECRET_BYTES)
        reply = check(await self.node.proposer.propose(scoped(CreateToken(
            request.request_id, request.name, request.role, tenants, secret_hash(secret),
            request.expires_ms, p.describe(), request.cert_subject), request)))
        assert isinstance(reply, TokenReply)
        return api_pb2.CreateTokenResponse(token=self._token(reply.token_id), secret=secret)

    @translated
    async def ListTokens(self, request, context):  # noqa: N802
        p = current_principal()
        out = api_pb2.ListTokensResponse()

        def listed(st: State) -> None:
            for token in st.access.tokens.values():
                expired = token.expires_ms and token.expires_ms <= st.clock_ms
                if (token.revoked_ms or expired) and not request.include_inactive:
                    continue
                if p.is_admin or (token.role in _GRANTABLE_BY_TENANT_ADMIN
                                  and set(token.tenants) <= set(p.tenants)):
                    codec.token_to_proto(token, out.tokens.add())

        self.read(listed)
        return out

    @translated
    async def RevokeToken(self, request, context):  # noqa: N802
        p = current_principal()
        validate_request_id(request.request_id)
        token = self.read(lambda st: st.access.tokens.get(request.token_id))
        if token is not None and not p.is_admin:
            if token.role not in _GRANTABLE_BY_TENANT_ADMIN:
                raise denied(f"token_id: {token.token_id} is a {token.role} token")
            p.require(TENANT_ADMIN, token.tenants)
        self.require_leader()
        reply = check(await self.node.proposer.propose(
            scoped(RevokeToken(request.request_id, request.token_id), request)))
        assert isinstance(reply, TokenReply)
        return api_pb2.RevokeTokenResponse(token=self._token(reply.token_id))

    @translated
    async def CreateTenant(self, request, context):  # noqa: N802
        return await self._set_tenant(request, create=True)

    @translated
    async def UpdateTenant(self, request, context):  # noqa: N802
        return await self._set_tenant(request, create=False)

    async def _set_tenant(self, request, *, create: bool):
        validate_request_id(request.request_id)
        tenant = codec.tenant_from_proto(request.tenant)
        if rejected := check_tenant(tenant):
            check(rejected)
        self.require_leader()
        reply = check(await self.node.proposer.propose(
            scoped(SetTenant(request.request_id, tenant, create), request)))
        assert isinstance(reply, TenantReply)
        return self._tenant(reply.name)

    @translated
    async def GetTenant(self, request, context):  # noqa: N802
        if not self.read(lambda st: request.name in st.access.tenants):
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"name: no tenant {request.name!r}")
        return self._tenant(request.name)

    @translated
    async def ListTenants(self, request, context):  # noqa: N802
        p = current_principal()
        out = api_pb2.ListTenantsResponse()

        def listed(st: State) -> None:
            for name in sorted(st.access.tenants):
                if p.is_admin or name in p.tenants:
                    codec.tenant_to_proto(st.access.tenants[name], out.tenants.add())

        self.read(listed)
        return out

    @translated
    async def ListAudit(self, request, context):  # noqa: N802
        limit = request.limit or 100
        if not 1 <= limit <= MAX_AUDIT_LIST:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"limit: must be 1 to {MAX_AUDIT_LIST}")
        if request.before_ms < 0:  # a key of the audit table is unsigned
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"before_ms: must be >= 0 (0 means now), got {request.before_ms}")
        store = self.node.replica.history.store
        entries = await asyncio.to_thread(store.list_audit, before_ms=request.before_ms,
                                          limit=limit)
        return api_pb2.ListAuditResponse(entries=[
            types_pb2.AuditEntry(at_ms=e.at_ms, actor=e.actor, action=e.action,
                                 detail=e.detail) for e in entries])

    def _tenant(self, name: str) -> api_pb2.TenantResponse:
        return self.read(lambda st: api_pb2.TenantResponse(
            tenant=codec.tenant_to_proto(st.access.tenants[name])))

    def _token(self, token_id: str):
        return self.read(lambda st: codec.token_to_proto(st.access.tokens[token_id]))
