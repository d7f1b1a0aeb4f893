"""Authentication (who calls) and authorization (may they) for the gRPC port (node/security/DESIGN.md).

Authentication is on when the node has `admin_token_file`: every call then needs
``authorization: Bearer <secret>``, matched by SHA-256 against the bootstrap admin token of
that file or the replicated tokens (node/core/access.py); an unknown, revoked or expired
token is UNAUTHENTICATED. Without the file every caller is the anonymous admin (a local
development cluster), and the node says so at start.

Authorization is one table, RULES, from RPC to what it needs: a role, and the tenants the
request touches (from its fields, or from the job or run it names). An RPC missing from the
table needs admin. A worker's tenants bound the queues its stream serves (node/leader/dispatch.py).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gnomon.node.core.access import (
    ADMIN,
    GATEWAY,
    TENANT_ADMIN,
    TENANT_READER,
    TENANT_WRITER,
    WORKER,
)

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
MIN_SECRET_CHARS = 32
# Role -> the roles whose permissions it includes (worker and gateway are roles apart).
_INCLUDES = {
    ADMIN: {ADMIN, TENANT_ADMIN, TENANT_WRITER, TENANT_READER, WORKER, GATEWAY},
    TENANT_ADMIN: {TENANT_ADMIN, TENANT_WRITER, TENANT_READER},
    TENANT_WRITER: {TENANT_WRITER, TENANT_READER},
    TENANT_READER: {TENANT_READER},
    WORKER: {WORKER},
    GATEWAY: {GATEWAY},
}


class AuthError(Exception):
    """`code` is "UNAUTHENTICATED" or "PERMISSION_DENIED" (or "INVALID_ARGUMENT": a request
    that names more than an access rule will look up); the message says why."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code


class MissingCredentials(AuthError):
    """No Authorization header: a verified client certificate may still stand for a token."""


def unauthenticated(detail: str) -> AuthError:
    return AuthError("UNAUTHENTICATED", detail)


def denied(detail: str) -> AuthError:
    return AuthError("PERMISSION_DENIED", detail)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a call runs as."""

    name: str
    role: str
    tenants: tuple[str, ...] = ()
    token_id: str = ""

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    def has(self, role: str) -> bool:
        return role in _INCLUDES[self.role]

    def require(self, role: str, tenants: Iterable[str] = ()) -> None:
        """PERMISSION_DENIED unless this principal holds `role` for every tenant given."""
        if not self.has(role):
            raise denied(f"role: {self.name!r} is {self.role}; this call needs {role}")
        if self.is_admin:
            return
        for tenant in tenants:
            if tenant not in self.tenants:
                raise denied(f"tenant: {self.name!r} may act for {', '.join(self.tenants)}, "
                             f"not {tenant!r}")

    def describe(self) -> str:
        return f"{self.name} ({self.role}{': ' + ', '.join(self.tenants) if self.tenants else ''})"


ANONYMOUS = Principal("anonymous", ADMIN)
MISSING = ("authorization: missing; send 'authorization: Bearer <token>' (or, under mutual TLS, "
           "a client certificate that stands for a token)")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def read_admin_token(path: str) -> str:
    """The bootstrap admin secret: the file's content without surrounding whitespace."""
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"admin_token_file: {path!r} cannot be read ({exc.strerror})") from None
    if len(secret) < MIN_SECRET_CHARS or any(ch.isspace() for ch in secret):
        raise ValueError(f"admin_token_file: {path!r} must hold one word of at least "
                         f"{MIN_SECRET_CHARS} characters")
    return secret


class Authenticator:
    """Bearer token -> Principal, against the bootstrap token and the replicated table.

    `tokens` is called under the replica lock by the caller's choice: it returns the
    replicated AccessState (read-only here)."""

    def __init__(self, admin_secret: str | None, tokens: Callable[[], object],
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.enabled = admin_secret is not None
        self._admin_hash = secret_hash(admin_secret) if admin_secret else ""
        self._tokens = tokens
        self._now_ms = now_ms

    def authenticate(self, metadata: Iterable[tuple[str, object]] | None) -> Principal:
        if not self.enabled:
            return ANONYMOUS
        header = next((str(v) for k, v in (metadata or ()) if k == "authorization"), None)
        if header is None:
            raise MissingCredentials("UNAUTHENTICATED", MISSING)
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise unauthenticated("authorization: expected 'Bearer <token>'")
        digest = secret_hash(secret.strip())
        if hmac.compare_digest(digest, self._admin_hash):
            return Principal("admin", ADMIN)
        access = self._tokens()
        token_id = access.by_hash.get(digest)  # type: ignore[attr-defined]
        token = access.tokens.get(token_id) if token_id else None  # type: ignore[attr-defined]
        if token is None:
            raise unauthenticated("authorization: unknown token")
        return self._principal(token)

    def authenticate_subject(self, subject: str) -> Principal:
        """The principal a verified client certificate's common name stands for (mutual
        TLS), or UNAUTHENTICATED."""
        access = self._tokens()
        token_id = access.by_subject.get(subject)  # type: ignore[attr-defined]
        token = access.tokens.get(token_id) if token_id else None  # type: ignore[attr-defined]
        if token is None:  # as if there were no certificate: the same answer as over HTTP
            raise unauthenticated(MISSING)
        return self._principal(token)

    def revalidate(self, principal: Principal) -> None:
        """UNAUTHENTICATED when `principal`'s token was revoked, has expired or is gone since
        it authenticated (a long-lived worker stream asks at every heartbeat). The bootstrap
        admin and the anonymous principal have no replicated token to lose."""
        if not (self.enabled and principal.token_id):
            return
        token = self._tokens().tokens.get(principal.token_id)  # type: ignore[attr-defined]
        if token is None:
            raise unauthenticated("authorization: unknown token")
        self._principal(token)

    def _principal(self, token) -> Principal:
        if token.revoked_ms:
            raise unauthenticated(f"authorization: token {token.token_id} was revoked")
        if token.expires_ms and token.expires_ms <= self._now_ms():
            raise unauthenticated(f"authorization: token {token.token_id} has expired")
        return Principal(token.name, token.role, token.tenants, token.token_id)
