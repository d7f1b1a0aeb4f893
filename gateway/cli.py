"""`gnomon-gateway` (and `gnomon gateway`): flags, environment, logging, run."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from gnomon.gateway.config import ConfigError, GatewayConfig
from gnomon.gateway.server import serve
from gnomon.httpguard.descriptors import raise_open_file_limit


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gnomon-gateway",
        description="A stateless front door: workers and clients dial it; it forwards every "
                    "call to the nodes' leader. Run any number of them.")
    p.add_argument("--listen", default="127.0.0.1:7700", metavar="HOST:PORT",
                   help="gRPC address to serve (default %(default)s)")
    p.add_argument("--servers", default=os.environ.get("GNOMON_SERVERS", ""),
                   metavar="H:P,...", help="the nodes' gRPC addresses (env GNOMON_SERVERS)")
    p.add_argument("--advertise", default="", metavar="HOST:PORT",
                   help="the address callers reach this gateway at (default: --listen)")
    p.add_argument("--tls-cert", default="", help="certificate served to callers (PEM)")
    p.add_argument("--tls-key", default="", help="its private key (PEM)")
    p.add_argument("--upstream-ca", default=os.environ.get("GNOMON_CA", ""),
                   help="CA of the nodes' certificates: TLS to the nodes (env GNOMON_CA)")
    p.add_argument("--upstream-cert", default="",
                   help="client certificate for nodes that ask for one (mutual TLS)")
    p.add_argument("--upstream-key", default="", help="its private key")
    p.add_argument("--max-calls", type=int, default=20_000,
                   help="calls and streams in flight at once (default %(default)s)")
    p.add_argument("--stream-buffer", type=int, default=64, metavar="MESSAGES",
                   help="a stream's messages read ahead of the node (default %(default)s)")
    p.add_argument("--worker-upstream", choices=("relay", "stream"), default=None,
                   help="worker streams over one multiplexed relay to the leader, or each "
                        "its own stream (default: relay with --relay-token-file, else stream)")
    p.add_argument("--relay-token-file", default="", metavar="FILE",
                   help="the relay's gateway token (gnomon token create NAME --role gateway); "
                        "required with --worker-upstream relay")
    p.add_argument("--relay-heartbeats", choices=("frames", "messages"), default="frames",
                   help="with --worker-upstream relay: workers' heartbeats as frames the leader "
                        "renews as it takes them, or as the workers' own messages "
                        "(default %(default)s)")
    p.add_argument("--http-listen", default="", metavar="HOST:PORT",
                   help="serve the nodes' HTTP API, dashboard and HTTP worker protocol here")
    p.add_argument("--http-servers", default="", metavar="H:P,...",
                   help="the nodes' HTTP addresses (with --http-listen)")
    p.add_argument("--http-advertise", default="", metavar="HOST:PORT",
                   help="the address browsers reach --http-listen at (default: it)")
    p.add_argument("--http-max-body", type=int, default=4 << 20, metavar="BYTES",
                   help="largest request body forwarded (default %(default)s)")
    for flag, default, what in (
            ("--http-header-timeout-ms", 10_000, "a request's line and headers must arrive"),
            ("--http-body-timeout-ms", 30_000, "a request's body must arrive after its headers"),
            ("--http-idle-timeout-ms", 60_000, "an idle keep-alive connection is closed"),
            ("--http-write-timeout-ms", 30_000, "a response must be read by the client"),
            ("--http-max-connections", 4_096, "HTTP connections open at once"),
            ("--http-max-connections-per-address", 1_024,
             "HTTP connections from one address (behind a load balancer: its one address)")):
        p.add_argument(flag, type=int, default=default, metavar="N",
                       help=f"{what} (default %(default)s)")
    p.add_argument("--metrics-listen", default="", metavar="HOST:PORT",
                   help="serve Prometheus /metrics here")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def config_from(args: argparse.Namespace) -> GatewayConfig:
    servers = tuple(s.strip() for s in args.servers.split(",") if s.strip())
    return GatewayConfig(
        listen_addr=args.listen, servers=servers, advertise_addr=args.advertise,
        tls_cert=args.tls_cert, tls_key=args.tls_key, upstream_ca=args.upstream_ca,
        upstream_cert=args.upstream_cert, upstream_key=args.upstream_key,
        max_calls=args.max_calls, stream_buffer_messages=args.stream_buffer,
        worker_upstream=args.worker_upstream or ("relay" if args.relay_token_file else "stream"),
        relay_token_file=args.relay_token_file,
        relay_heartbeats=args.relay_heartbeats,
        http_listen_addr=args.http_listen,
        http_servers=tuple(s.strip() for s in args.http_servers.split(",") if s.strip()),
        http_advertise=args.http_advertise, http_max_body_bytes=args.http_max_body,
        http_header_timeout_ms=args.http_header_timeout_ms,
        http_body_timeout_ms=args.http_body_timeout_ms,
        http_idle_timeout_ms=args.http_idle_timeout_ms,
        http_write_timeout_ms=args.http_write_timeout_ms,
        http_max_connections=args.http_max_connections,
        http_max_connections_per_address=args.http_max_connections_per_address,
        metrics_listen_addr=args.metrics_listen, log_level=args.log_level)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.version:
        from importlib.metadata import version

        print(f"gnomon-gateway {version('gnomon')}")
        return 0
    try:
        cfg = config_from(args)
        if cfg.worker_upstream == "relay":
            cfg.relay_token()  # read at start: a bad file stops the gateway here
    except ConfigError as exc:
        print(f"gnomon-gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Every stream and HTTP connection is a descriptor: the soft limit up to the hard one.
    raise_open_file_limit()
    asyncio.run(serve(cfg))
    return 0
