"""Authentication hook for the HTTP port (issue 10 fills it).

Every API request passes through `authenticate` before its servicer runs, and its
`Authorization` header is handed to the servicer as gRPC metadata, so the bearer-token check
the security work adds to the servicers covers HTTP as well. Until then every request is
allowed (like the gRPC port today).
"""

from __future__ import annotations

from aiohttp import web


def authenticate(request: web.Request) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata for this request's servicer call. To refuse a request, raise
    `Problem(grpc.StatusCode.UNAUTHENTICATED, "authorization: ...")` (401) or
    PERMISSION_DENIED (403); it then changes nothing."""
    token = request.headers.get("Authorization", "")
    return (("authorization", token),) if token else ()
