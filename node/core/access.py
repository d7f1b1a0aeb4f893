"""Who may call and how much: bearer tokens and tenants as replicated state (node/security/DESIGN.md).

A token's secret never enters the log: the leader draws it, the command carries its SHA-256,
and the caller sees the secret once, in the reply of the RPC that created it. Every node
authenticates locally against this table (plus the bootstrap admin token of its own file).
Revocation is a committed command, so a revoked token stops working on every replica at the
same log index. Expiry is a field; nodes compare it with their wall clock when they
authenticate (the core never reads a clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.results import Done

__all__ = ["ADMIN", "AccessState", "CLUSTER_ROLES", "CreateToken", "GATEWAY", "HANDLER_PAIRS",
           "ROLES", "RecordAudit",
           "RevokeToken",
           "SetTenant", "TENANT_ROLES", "Tenant", "TenantReply", "Token", "TokenReply", "WORKER"]

ADMIN, TENANT_ADMIN, TENANT_WRITER, TENANT_READER, WORKER = (
    "admin", "tenant-admin", "tenant-writer", "tenant-reader", "worker")
# A gateway's token: it may open GatewayService.Relay and nothing else; the worker streams it
# relays act with their own workers' tokens (node/api/grpc/relay.py).
GATEWAY = "gateway"
ROLES = (ADMIN, TENANT_ADMIN, TENANT_WRITER, TENANT_READER, WORKER, GATEWAY)
TENANT_ROLES = (TENANT_ADMIN, TENANT_WRITER, TENANT_READER, WORKER)
# Roles that act cluster-wide: their tokens name no tenant.
CLUSTER_ROLES = (ADMIN, GATEWAY)
MAX_NAME_CHARS = 128
MAX_TENANTS_PER_TOKEN = 100
MAX_TENANT_WEIGHT = 1000
MAX_TENANT_NAME_CHARS = 128


@dataclass(frozen=True, slots=True)
class Token:
    token_id: str
    name: str
    role: str
    tenants: tuple[str, ...]
    secret_sha256: str
    created_ms: int
    expires_ms: int = 0  # 0: never
    revoked_ms: int = 0  # 0: not revoked
    created_by: str = ""
    # A client certificate's common name that stands for this token under mutual TLS.
    cert_subject: str = ""


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant's share and bounds. A tenant without a record has weight 1 and no bounds
    beyond the cluster's. 0 means "no bound of its own" for every max_* field."""

    name: str
    weight: int = 1  # share of a saturated queue: weight / sum of the busy tenants' weights
    max_concurrency: int = 0  # tasks leased at once (more wait, counted; never fail)
    max_jobs: int = 0  # jobs (CreateJob beyond it: RESOURCE_EXHAUSTED)
    max_queued_tasks: int = 0  # ready tasks waiting (TriggerJob and replays beyond it are refused)
    api_rate_per_s: int = 0  # API calls per second on the leader (beyond: RESOURCE_EXHAUSTED)
    api_burst: int = 0  # calls allowed at once above the rate (0: one second's worth)
    created_ms: int = 0
    updated_ms: int = 0
    max_active_runs: int = 0  # runs running at once (TriggerJob beyond: RESOURCE_EXHAUSTED)
    max_payload_bytes: int = 0  # task payload bytes over all its jobs (beyond: RESOURCE_EXHAUSTED)


@dataclass
class AccessState:
    """Replicated tokens and tenants; `by_hash` is derived (rebuilt on restore)."""

    token_seq: int = 0
    tokens: dict[str, Token] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)
    by_subject: dict[str, str] = field(default_factory=dict)  # derived, like by_hash
    tenants: dict[str, Tenant] = field(default_factory=dict)
    # Derived: tenant -> task payload bytes of its jobs (for max_payload_bytes).
    payload_bytes: dict[str, int] = field(default_factory=dict)

    def add_payload(self, tenant: str, delta: int) -> None:
        total = self.payload_bytes.get(tenant, 0) + delta
        if total:
            self.payload_bytes[tenant] = total
        else:
            self.payload_bytes.pop(tenant, None)

    def add(self, token: Token) -> None:
        self.tokens[token.token_id] = token
        self.by_hash[token.secret_sha256] = token.token_id
        if token.cert_subject:
            self.by_subject[token.cert_subject] = token.token_id

    def forget(self, token_id: str) -> None:
        token = self.tokens.pop(token_id)
        self.by_hash.pop(token.secret_sha256, None)
        if token.cert_subject:
            self.by_subject.pop(token.cert_subject, None)


@dataclass(frozen=True, slots=True)
class CreateToken:
    request_id: str
    name: str
    role: str
    tenants: tuple[str, ...]
    secret_sha256: str
    expires_ms: int = 0
    created_by: str = ""
    cert_subject: str = ""
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class RevokeToken:
    request_id: str
    token_id: str
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class SetTenant:
    """Create (`create`) or change a tenant; the record's times are set by apply."""

    request_id: str
    tenant: Tenant
    create: bool = False
    request_scope: str = ""
    request_fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class RecordAudit:
    """An administrative action, for the audit log: changes no state; every replica writes
    it to its history store (effects.audit) at the command's cluster time."""

    actor: str
    action: str
    detail: str


@dataclass(frozen=True, slots=True)
class TenantReply:
    name: str


@dataclass(frozen=True, slots=True)
class TokenReply:
    """CreateToken / RevokeToken: the token concerned."""

    token_id: str


def _invalid(detail: str) -> Rejected:
    return Rejected(Code.INVALID_ARGUMENT, detail)


def check_token_fields(name: str, role: str, tenants: tuple[str, ...],
                       expires_ms: int) -> Rejected | None:
    """The rules of a new token (also checked by the servicer before it proposes)."""
    if not name or len(name) > MAX_NAME_CHARS:
        return _invalid(f"name: 1 to {MAX_NAME_CHARS} characters required")
    if role not in ROLES:
        return _invalid(f"role: {role!r} is not one of {', '.join(ROLES)}")
    if role in CLUSTER_ROLES and tenants:
        return _invalid(f"tenants: a {role} token is not scoped to tenants (leave it empty)")
    if role not in CLUSTER_ROLES and not tenants:
        return _invalid(f"tenants: a {role} token needs at least one tenant")
    if len(tenants) > MAX_TENANTS_PER_TOKEN:
        return _invalid(f"tenants: at most {MAX_TENANTS_PER_TOKEN}")
    if any(not t for t in tenants) or len(set(tenants)) != len(tenants):
        return _invalid("tenants: names must be non-empty and distinct")
    if expires_ms < 0:
        return _invalid("expires_ms: must be 0 (never) or a time in ms since the epoch")
    return None


def _create_token(ctx: Any, cmd: CreateToken) -> TokenReply | Rejected:
    access: AccessState = ctx.state.access
    rejected = check_token_fields(cmd.name, cmd.role, cmd.tenants, cmd.expires_ms)
    if rejected:
        return rejected
    if len(cmd.secret_sha256) != 64 or any(ch not in "0123456789abcdef"
                                           for ch in cmd.secret_sha256):
        return _invalid("secret_sha256: 64 lowercase hex digits required")
    if cmd.secret_sha256 in access.by_hash:
        return Rejected(Code.ALREADY_EXISTS, "secret_sha256: a token with this secret exists")
    if cmd.expires_ms and cmd.expires_ms <= ctx.now:
        return _invalid("expires_ms: already in the past")
    if len(cmd.cert_subject) > MAX_NAME_CHARS:
        return _invalid(f"cert_subject: at most {MAX_NAME_CHARS} characters")
    if cmd.cert_subject and cmd.cert_subject in access.by_subject:
        return Rejected(Code.ALREADY_EXISTS,
                        f"cert_subject: {cmd.cert_subject!r} already stands for token "
                        f"{access.by_subject[cmd.cert_subject]}")
    dead = _dead_to_forget(ctx, cmd.tenants)
    if isinstance(dead, Rejected):
        return dead
    for token_id in dead:
        access.forget(token_id)
    access.token_seq += 1
    token_id = f"t{access.token_seq}"
    access.add(Token(token_id, cmd.name, cmd.role, tuple(sorted(cmd.tenants)),
                     cmd.secret_sha256, ctx.now, cmd.expires_ms, 0, cmd.created_by,
                     cmd.cert_subject))
    return TokenReply(token_id)


def _dead_to_forget(ctx: Any, tenants: tuple[str, ...]) -> list[str] | Rejected:
    """Room for one more token in each of `tenants` ("" stands for cluster-wide tokens)
    under `max_tokens_per_tenant`: the ids of the oldest revoked or expired tokens to forget
    for it, or RESOURCE_EXHAUSTED when a tenant is at the bound with live tokens only."""
    bound, now = ctx.limits.max_tokens_per_tenant, ctx.now
    forget: list[str] = []
    for tenant in sorted(tenants) or [""]:
        mine = [t for t in ctx.state.access.tokens.values()
                if tenant in (t.tenants or ("",)) and t.token_id not in forget]
        excess = len(mine) - bound + 1
        if excess <= 0:
            continue
        dead = [t.token_id for t in mine
                if t.revoked_ms or (t.expires_ms and t.expires_ms <= now)]
        if len(dead) < excess:
            return Rejected(Code.RESOURCE_EXHAUSTED,
                            f"tenants: tenant {tenant or '(cluster-wide)'!r} has {len(mine)} "
                            f"tokens, the most max_tokens_per_tenant ({bound}) allows, none of "
                            "them revoked or expired; revoke one first")
        forget += dead[:excess]
    return forget


def _revoke_token(ctx: Any, cmd: RevokeToken) -> TokenReply | Rejected:
    access: AccessState = ctx.state.access
    token = access.tokens.get(cmd.token_id)
    if token is None:
        return Rejected(Code.NOT_FOUND, f"token_id: no token {cmd.token_id!r}")
    if not token.revoked_ms:
        access.tokens[cmd.token_id] = replace(token, revoked_ms=ctx.now)
    return TokenReply(cmd.token_id)


def max_jobs(access: AccessState, tenant: str, cluster_max: int) -> int:
    """The job quota of `tenant`: its own max_jobs when set, else the cluster's."""
    record = access.tenants.get(tenant)
    return record.max_jobs if record is not None and record.max_jobs else cluster_max


def payload_bytes(spec: Any) -> int:
    """Task payload bytes of a job spec."""
    return sum(len(task.payload) for task in spec.tasks)


def check_payload_quota(access: AccessState, tenant: str, extra: int) -> Rejected | None:
    """RESOURCE_EXHAUSTED when `extra` more payload bytes would pass the tenant's bound."""
    record = access.tenants.get(tenant)
    if record is None or not record.max_payload_bytes or extra <= 0:
        return None
    total = access.payload_bytes.get(tenant, 0) + extra
    if total > record.max_payload_bytes:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"spec.tasks.payload: tenant {tenant!r} would hold {total} payload bytes "
                        f"(max_payload_bytes {record.max_payload_bytes})")
    return None


def check_tenant(t: Tenant) -> Rejected | None:
    """The rules of a tenant record (also checked by the servicer before it proposes)."""
    if not t.name or len(t.name) > MAX_TENANT_NAME_CHARS or "/" in t.name:
        return _invalid(f"name: 1 to {MAX_TENANT_NAME_CHARS} characters, no '/'")
    if not 1 <= t.weight <= MAX_TENANT_WEIGHT:
        return _invalid(f"weight: must be 1 to {MAX_TENANT_WEIGHT}")
    for name in ("max_concurrency", "max_jobs", "max_queued_tasks", "api_rate_per_s",
                 "api_burst", "max_active_runs", "max_payload_bytes"):
        if getattr(t, name) < 0:
            return _invalid(f"{name}: must be >= 0 (0: no bound of its own)")
    return None


def _set_tenant(ctx: Any, cmd: SetTenant) -> TenantReply | Rejected:
    access: AccessState = ctx.state.access
    rejected = check_tenant(cmd.tenant)
    if rejected:
        return rejected
    old = access.tenants.get(cmd.tenant.name)
    if cmd.create and old is not None:
        return Rejected(Code.ALREADY_EXISTS, f"name: tenant {cmd.tenant.name!r} exists")
    if not cmd.create and old is None:
        return Rejected(Code.NOT_FOUND, f"name: no tenant {cmd.tenant.name!r}")
    created = old.created_ms if old is not None else ctx.now
    access.tenants[cmd.tenant.name] = replace(cmd.tenant, created_ms=created, updated_ms=ctx.now)
    return TenantReply(cmd.tenant.name)


def _record_audit(ctx: Any, cmd: RecordAudit) -> Done:
    ctx.effects.audit.append((ctx.now, cmd.actor, cmd.action, cmd.detail))
    return Done()


HANDLER_PAIRS = [(CreateToken, _create_token), (RevokeToken, _revoke_token),
                 (SetTenant, _set_tenant), (RecordAudit, _record_audit)]
