"""Authentication and authorization of the HTTP port: the gRPC port's, called directly.

The gRPC port checks bearer tokens and RULES in a server interceptor (AccessGuard,
node/api/grpc/access.py); HTTP calls do not pass through it, so each API call here asks the
node's one AccessGuard the same questions before its servicer runs: who the token is
(`Authorization: Bearer <secret>`, UNAUTHENTICATED 401 if unknown), whether RULES let that
principal make this RPC with this request (PERMISSION_DENIED 403), and the tenants' API rate
limits (RESOURCE_EXHAUSTED 429 with Retry-After), with the same messages as over gRPC. The
principal is then set for the servicer as the interceptor sets it (tenant scoping), and a
successful administrative call is written to the audit log as the interceptor writes it.

Browsers cannot set headers on an EventSource, so `/v1/events` also takes the token as
`?access_token=`; the stream names every tenant's runs, so it needs an admin principal.
"""

from __future__ import annotations

import grpc
from aiohttp import web

from gnomon.node.api.grpc import access
from gnomon.node.api.http.problems import Problem
from gnomon.node.security.auth import AuthError, Principal


def _metadata(request: web.Request, *, allow_query: bool) -> tuple[tuple[str, str], ...]:
    token = request.headers.get("Authorization", "")
    if not token and allow_query and request.query.get("access_token"):
        token = f"Bearer {request.query['access_token']}"
    return (("authorization", token),) if token else ()


def _problem(exc: AuthError) -> Problem:
    return Problem(getattr(grpc.StatusCode, exc.code), str(exc))


def principal(node, request: web.Request, *, allow_query: bool = False
              ) -> tuple[Principal, tuple[tuple[str, str], ...]]:
    metadata = _metadata(request, allow_query=allow_query)
    try:
        with node.replica.lock:
            return node.access_guard._authenticator.authenticate(metadata), metadata
    except AuthError as exc:
        raise _problem(exc) from None


class Call:
    """One API call's principal, as the interceptor would see it."""

    def __init__(self, node, who: Principal, method: str, metadata):
        self.node, self.who, self.method, self.metadata = node, who, method, metadata

    async def succeeded(self, message) -> None:
        """After the servicer answered: an administrative call goes to the audit log, as the
        interceptor records it (committed before the HTTP answer goes out)."""
        if self.method in access.AUDITED:
            await self.node.access_guard.audit(self.who, self.method, message)


async def authorize(node, service: str, method: str, request: web.Request, message,
                    context, *, who: Principal | None = None,
                    metadata: tuple[tuple[str, str], ...] = ()) -> Call:
    """Authorize one API call as the gRPC port would (the metadata for the servicer is on
    the result), for `who` (authenticated with `principal()` before the body was read), or
    authenticating first. Raises a Problem (it changes nothing) when refused."""
    if who is None:
        who, metadata = principal(node, request)
    path = f"/gnomon.v1.{service}/{method}"
    await access._authorize(path, who, message, node.access_guard, context)
    return Call(node, who, path, metadata)


def authorize_events(node, request: web.Request) -> None:
    who, _ = principal(node, request, allow_query=True)
    if not who.is_admin:
        raise Problem(grpc.StatusCode.PERMISSION_DENIED,
                      f"role: {who.name!r} is {who.role}; the event stream names every "
                      "tenant's runs and needs admin")
