"""Authentication hook for the HTTP port (issue 10 fills it).

Every API request passes through `authenticate` before its servicer runs, and its
`Authorization` header is handed to the servicer as gRPC metadata. The gRPC port checks bearer
tokens in a server interceptor, which HTTP calls do not pass through: until this hook calls the
same check, a node whose gRPC port authenticates (`admin_token_file` set) refuses every HTTP
API call with 401 instead of serving it unauthenticated (fail closed). Without authentication
on the node every request is allowed, as on the gRPC port.
"""

from __future__ import annotations

import grpc
from aiohttp import web

from gnomon.node.http.problems import Problem


def authenticate(request: web.Request, config) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata for this request's servicer call; raises a Problem (401/403, it
    changes nothing) when the request may not be served."""
    if getattr(config, "admin_token_file", ""):
        raise Problem(grpc.StatusCode.UNAUTHENTICATED,
                      "authorization: this node authenticates its gRPC port and the HTTP port "
                      "does not check tokens yet (node/http/auth.py); use the gRPC port")
    token = request.headers.get("Authorization", "")
    return (("authorization", token),) if token else ()
