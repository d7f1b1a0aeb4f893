#!/usr/bin/env python3
"""gnomon-healthcheck [SERVICE]: a container probe of the node beside it, over the node's TLS.

Exit 0 when the node's gRPC health service answers SERVING for SERVICE, 1 otherwise. SERVICE
"" (the default) is readiness: the node knows a leader whose proof is fresh;
"gnomon.v1.ClusterService" is liveness: the process answers, with or without quorum.
Kubernetes' gRPC probes and docker's healthchecks speak no TLS, and every deploy file turns TLS
on, so the image installs this script as /usr/local/bin/gnomon-healthcheck (deploy/Dockerfile)
and the probes run it.

It reads the GNOMON_* variables the node runs with: the address the node binds (its own entry
in GNOMON_MEMBERS, by GNOMON_NODE_ID; GNOMON_HEALTHCHECK_ADDR overrides it), TLS when
GNOMON_TLS_CERT is set, trusting the cluster CA (GNOMON_RAFT_TLS_CA) and, when the port asks
for client certificates (GNOMON_TLS_CLIENT_CA), presenting the node's own certificate. The
health service needs no token.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

TIMEOUT_S = 2.0  # below the probes' timeoutSeconds


def own_address(env: Mapping[str, str]) -> str:
    """The gRPC address of GNOMON_NODE_ID in GNOMON_MEMBERS (id=raft,grpc[,http];...)."""
    me = env.get("GNOMON_NODE_ID", "")
    for item in env.get("GNOMON_MEMBERS", "").split(";"):
        node_id, _, addrs = item.partition("=")
        parts = addrs.split(",")
        if node_id.strip() == me and len(parts) >= 2:
            return parts[1].strip()
    raise SystemExit(f"gnomon-healthcheck: node {me!r} is not in GNOMON_MEMBERS")


def main(argv: list[str]) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    env = os.environ
    service = argv[1] if len(argv) > 1 else ""
    addr = env.get("GNOMON_HEALTHCHECK_ADDR") or own_address(env)
    if env.get("GNOMON_TLS_CERT"):
        def read(name: str) -> bytes:
            with open(env[name], "rb") as fh:
                return fh.read()

        mutual = bool(env.get("GNOMON_TLS_CLIENT_CA"))
        creds = grpc.ssl_channel_credentials(
            read("GNOMON_RAFT_TLS_CA"),
            read("GNOMON_RAFT_TLS_KEY") if mutual else None,
            read("GNOMON_RAFT_TLS_CERT") if mutual else None)
        channel = grpc.secure_channel(addr, creds)
    else:
        channel = grpc.insecure_channel(addr)
    try:
        with channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S).status
    except grpc.RpcError as exc:
        print(f"gnomon-healthcheck: {addr}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    if status != health_pb2.HealthCheckResponse.SERVING:
        print(f"gnomon-healthcheck: {addr} service {service!r}: {name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
