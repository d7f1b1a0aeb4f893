"""`python -m gnomon.node.certs`: a cluster CA and node certificates for the Raft port.

    python -m gnomon.node.certs --dir /etc/gnomon/tls --node n1=10.0.0.1 --node n2=10.0.0.2 \\
        --node n3=10.0.0.3,gnomon-3.internal

writes ca.crt, ca.key and <id>.crt / <id>.key per node (keys 0600) and prints each node's
flags. Files already there are reused while they fit. Keep ca.key off the nodes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gnomon.node.security.certificates import ensure_cluster_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gnomon.node.certs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, type=Path, help="where the files go")
    parser.add_argument("--node", action="append", required=True, metavar="ID=HOST[,HOST]",
                        help="a member and the hosts its certificate names (repeat)")
    parser.add_argument("--ca-name", default="gnomon cluster CA", help="the CA's common name")
    args = parser.parse_args(argv)
    nodes: dict[str, list[str]] = {}
    for item in args.node:
        node_id, sep, hosts = item.partition("=")
        if not sep or not node_id.strip():
            parser.error(f"--node: {item!r} is not ID=HOST[,HOST...]")
        nodes[node_id.strip()] = [h.strip() for h in hosts.split(",") if h.strip()]
    files = ensure_cluster_files(args.dir, nodes, common_name=args.ca_name)
    for node_id, f in files.items():
        print(f"{node_id}: {' '.join(f.flags())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
