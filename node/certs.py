"""`python -m gnomon.node.certs`: a cluster CA and node certificates for the Raft port.

    python -m gnomon.node.certs --dir /etc/gnomon/tls --node n1=10.0.0.1 --node n2=10.0.0.2 \\
        --node n3=10.0.0.3,gnomon-3.internal

writes ca.crt, ca.key and <id>.crt / <id>.key per node (keys 0600) and prints each node's
flags. `--gateway NAME=HOST[,HOST]` adds a gateway's serving certificate (no node identity:
it cannot pass for a Raft peer). Files already there are reused while they fit. Keep ca.key
off the nodes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gnomon.node.security.certificates import ensure_cluster_files, ensure_gateway_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gnomon.node.certs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, type=Path, help="where the files go")
    parser.add_argument("--node", action="append", default=[], metavar="ID=HOST[,HOST]",
                        help="a member and the hosts its certificate names (repeat)")
    parser.add_argument("--gateway", action="append", default=[], metavar="NAME=HOST[,HOST]",
                        help="a gateway and the hosts its certificate names (repeat)")
    parser.add_argument("--ca-name", default="gnomon cluster CA", help="the CA's common name")
    args = parser.parse_args(argv)
    if not (args.node or args.gateway):
        parser.error("give at least one --node or --gateway")
    nodes = _named_hosts(parser, "--node", args.node)
    files = ensure_cluster_files(args.dir, nodes, common_name=args.ca_name)
    for node_id, f in files.items():
        print(f"{node_id}: {' '.join(f.flags())}")
    for name, hosts in _named_hosts(parser, "--gateway", args.gateway).items():
        g = ensure_gateway_files(args.dir, name, hosts, common_name=args.ca_name)
        print(f"{name}: --tls-cert {g.cert} --tls-key {g.key}")
    return 0


def _named_hosts(parser: argparse.ArgumentParser, flag: str,
                 items: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, hosts = item.partition("=")
        if not sep or not name.strip():
            parser.error(f"{flag}: {item!r} is not NAME=HOST[,HOST...]")
        out[name.strip()] = [h.strip() for h in hosts.split(",") if h.strip()]
    return out


if __name__ == "__main__":
    sys.exit(main())
