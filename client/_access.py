"""Bearer tokens and tenants: models and the client calls of AccessService (mixed into the
clients)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any, Literal

from gnomon.v1 import api_pb2

Role = Literal["admin", "tenant-admin", "tenant-writer", "tenant-reader", "worker", "gateway"]
ACCESS_SERVICE = "access"


def _when(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


@dataclass(frozen=True, slots=True)
class Token:
    """A bearer token as the cluster lists it (its secret is never shown again)."""

    token_id: str
    name: str
    role: str
    tenants: tuple[str, ...]
    created_ms: int
    expires_ms: int  # 0: never
    revoked_ms: int  # 0: not revoked
    created_by: str
    cert_subject: str = ""

    @property
    def expires(self) -> datetime | None:
        return _when(self.expires_ms)

    @property
    def revoked(self) -> datetime | None:
        return _when(self.revoked_ms)


@dataclass(frozen=True, slots=True)
class NewToken:
    """``create_token``'s answer: the token and its secret (store it now)."""

    token: Token
    secret: str


@dataclass(frozen=True, slots=True)
class Identity:
    """``whoami``: the caller as the cluster sees it."""

    name: str
    role: str
    tenants: tuple[str, ...]
    token_id: str
    authentication_required: bool


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant's share of the workers and its bounds; 0 in a ``max_*`` field means no bound
    of its own (the cluster's apply)."""

    name: str
    weight: int = 1
    """Share of a saturated queue: weight / sum of the weights of the tenants with work."""
    max_concurrency: int = 0
    """Tasks leased at once; more wait, never fail."""
    max_jobs: int = 0
    max_queued_tasks: int = 0
    """Tasks waiting for a worker; at it, triggers are ResourceExhausted (retried later)."""
    api_rate_per_s: int = 0
    """API calls per second; beyond it ResourceExhausted (retried after ``retry-after-ms``)."""
    api_burst: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    max_active_runs: int = 0
    """Runs running at once; at it, triggers are ResourceExhausted (retried later)."""
    max_payload_bytes: int = 0
    """Task payload bytes over all the tenant's jobs; beyond it, creates are refused."""


TENANT_SETTINGS = tuple(f.name for f in fields(Tenant) if f.name not in
                        ("name", "created_ms", "updated_ms"))


def tenant_from_proto(m: Any) -> Tenant:
    return Tenant(**{f.name: getattr(m, f.name) for f in fields(Tenant)})


def _tenant_request(request_id: str | None, tenant: Tenant) -> Any:
    from gnomon.v1 import types_pb2

    m = types_pb2.Tenant(**{n: getattr(tenant, n) for n in ("name", *TENANT_SETTINGS)})
    return api_pb2.SetTenantRequest(request_id=request_id or uuid.uuid4().hex, tenant=m)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An administrative action: when (cluster time), who, what, and its request (JSON)."""

    at_ms: int
    actor: str
    action: str
    detail: str

    @property
    def at(self) -> datetime | None:
        return _when(self.at_ms)


def token_from_proto(m: Any) -> Token:
    return Token(m.token_id, m.name, m.role, tuple(m.tenants), m.created_ms, m.expires_ms,
                 m.revoked_ms, m.created_by, m.cert_subject)


class AccessCalls:
    """AsyncClient's AccessService calls (needs `_call`)."""

    async def create_token(self, name: str, role: Role, tenants: Sequence[str] = (), *,
                           expires_ms: int = 0, cert_subject: str = "",
                           request_id: str | None = None,
                           timeout_s: float | None = None) -> NewToken:
        """A new bearer token. Admins create any (a gateway token, for a gateway's relay,
        names no tenant); a tenant-admin tenant-writer, tenant-reader and worker tokens of
        its own tenants. With ``cert_subject``, a client
        certificate of that common name stands for the token under mutual TLS."""
        req = api_pb2.CreateTokenRequest(request_id=request_id or uuid.uuid4().hex, name=name,
                                         role=role, tenants=list(tenants), expires_ms=expires_ms,
                                         cert_subject=cert_subject)
        resp = await self._call(ACCESS_SERVICE, "CreateToken", req, timeout_s=timeout_s)  # type: ignore[attr-defined]
        return NewToken(token_from_proto(resp.token), resp.secret)

    async def list_tokens(self, *, include_inactive: bool = False,
                          timeout_s: float | None = None) -> list[Token]:
        """The tokens the caller may manage (revoked and expired ones with include_inactive)."""
        req = api_pb2.ListTokensRequest(include_inactive=include_inactive)
        resp = await self._call(ACCESS_SERVICE, "ListTokens", req, timeout_s=timeout_s)  # type: ignore[attr-defined]
        return [token_from_proto(t) for t in resp.tokens]

    async def revoke_token(self, token_id: str, *, request_id: str | None = None,
                           timeout_s: float | None = None) -> Token:
        """Revoke a token on every node (idempotent)."""
        req = api_pb2.RevokeTokenRequest(request_id=request_id or uuid.uuid4().hex,
                                         token_id=token_id)
        resp = await self._call(ACCESS_SERVICE, "RevokeToken", req, timeout_s=timeout_s)  # type: ignore[attr-defined]
        return token_from_proto(resp.token)

    async def create_tenant(self, name: str, *, request_id: str | None = None,
                            timeout_s: float | None = None, **settings: int) -> Tenant:
        """A new tenant (admins); ``settings`` are Tenant fields (weight, max_concurrency...)."""
        req = _tenant_request(request_id, _tenant_with(Tenant(name), settings))
        resp = await self._call(ACCESS_SERVICE, "CreateTenant", req, timeout_s=timeout_s)  # type: ignore[attr-defined]
        return tenant_from_proto(resp.tenant)

    async def update_tenant(self, name: str, *, request_id: str | None = None,
                            timeout_s: float | None = None, **settings: int) -> Tenant:
        """Change the given settings of a tenant (admins); the others keep their value."""
        current = await self.get_tenant(name, timeout_s=timeout_s)
        req = _tenant_request(request_id, _tenant_with(current, settings))
        resp = await self._call(ACCESS_SERVICE, "UpdateTenant", req, timeout_s=timeout_s)  # type: ignore[attr-defined]
        return tenant_from_proto(resp.tenant)

    async def get_tenant(self, name: str, *, timeout_s: float | None = None) -> Tenant:
        """A tenant's record; NotFound for a tenant without one (weight 1, no bounds)."""
        req = api_pb2.GetTenantRequest(name=name)
        resp = await self._call(ACCESS_SERVICE, "GetTenant", req, timeout_s=timeout_s)  # type: ignore[attr-defined]
        return tenant_from_proto(resp.tenant)

    async def list_tenants(self, *, timeout_s: float | None = None) -> list[Tenant]:
        """Tenants with a record (an admin sees all, others their own), by name."""
        resp = await self._call(ACCESS_SERVICE, "ListTenants", api_pb2.ListTenantsRequest(),  # type: ignore[attr-defined]
                                timeout_s=timeout_s)
        return [tenant_from_proto(t) for t in resp.tenants]

    async def list_audit(self, *, limit: int = 100, before_ms: int = 0,
                         timeout_s: float | None = None) -> list[AuditEntry]:
        """Administrative actions, newest first (admins)."""
        req = api_pb2.ListAuditRequest(limit=limit, before_ms=before_ms)
        resp = await self._call(ACCESS_SERVICE, "ListAudit", req, timeout_s=timeout_s)  # type: ignore[attr-defined]
        return [AuditEntry(e.at_ms, e.actor, e.action, e.detail) for e in resp.entries]

    async def whoami(self, *, timeout_s: float | None = None) -> Identity:
        """Who this client's token makes it."""
        resp = await self._call(ACCESS_SERVICE, "WhoAmI", api_pb2.WhoAmIRequest(),  # type: ignore[attr-defined]
                                timeout_s=timeout_s)
        return Identity(resp.name, resp.role, tuple(resp.tenants), resp.token_id,
                        resp.authentication_required)


def _tenant_with(tenant: Tenant, settings: dict[str, int]) -> Tenant:
    unknown = sorted(set(settings) - set(TENANT_SETTINGS))
    if unknown:
        from ._errors import InvalidArgument

        raise InvalidArgument(f"{unknown[0]}: not a tenant setting (one of "
                              f"{', '.join(TENANT_SETTINGS)})")
    changes: dict[str, Any] = dict(settings)  # every one an int field (TENANT_SETTINGS)
    return replace(tenant, **changes)


class BlockingAccessCalls:
    """Client's AccessService calls (needs `_run` and `_async`)."""

    def create_token(self, name: str, role: Role, tenants: Sequence[str] = (), *,
                     expires_ms: int = 0, cert_subject: str = "",
                     request_id: str | None = None,
                     timeout_s: float | None = None) -> NewToken:
        return self._run(self._async.create_token(  # type: ignore[attr-defined]
            name, role, tenants, expires_ms=expires_ms, cert_subject=cert_subject,
            request_id=request_id, timeout_s=timeout_s))

    def list_tokens(self, *, include_inactive: bool = False,
                    timeout_s: float | None = None) -> list[Token]:
        return self._run(self._async.list_tokens(  # type: ignore[attr-defined]
            include_inactive=include_inactive, timeout_s=timeout_s))

    def revoke_token(self, token_id: str, *, request_id: str | None = None,
                     timeout_s: float | None = None) -> Token:
        return self._run(self._async.revoke_token(  # type: ignore[attr-defined]
            token_id, request_id=request_id, timeout_s=timeout_s))

    def list_audit(self, *, limit: int = 100, before_ms: int = 0,
                   timeout_s: float | None = None) -> list[AuditEntry]:
        return self._run(self._async.list_audit(  # type: ignore[attr-defined]
            limit=limit, before_ms=before_ms, timeout_s=timeout_s))

    def whoami(self, *, timeout_s: float | None = None) -> Identity:
        return self._run(self._async.whoami(timeout_s=timeout_s))  # type: ignore[attr-defined]

    def create_tenant(self, name: str, *, request_id: str | None = None,
                      timeout_s: float | None = None, **settings: int) -> Tenant:
        return self._run(self._async.create_tenant(  # type: ignore[attr-defined]
            name, request_id=request_id, timeout_s=timeout_s, **settings))

    def update_tenant(self, name: str, *, request_id: str | None = None,
                      timeout_s: float | None = None, **settings: int) -> Tenant:
        return self._run(self._async.update_tenant(  # type: ignore[attr-defined]
            name, request_id=request_id, timeout_s=timeout_s, **settings))

    def get_tenant(self, name: str, *, timeout_s: float | None = None) -> Tenant:
        return self._run(self._async.get_tenant(name, timeout_s=timeout_s))  # type: ignore[attr-defined]

    def list_tenants(self, *, timeout_s: float | None = None) -> list[Tenant]:
        return self._run(self._async.list_tenants(timeout_s=timeout_s))  # type: ignore[attr-defined]


# The blocking calls say what the asynchronous ones say.
for _name in ("create_token", "list_tokens", "revoke_token", "whoami", "create_tenant",
              "update_tenant", "get_tenant", "list_tenants", "list_audit"):
    getattr(BlockingAccessCalls, _name).__doc__ = getattr(AccessCalls, _name).__doc__
