"""`gnomon-node`: run one scheduler node (flags, GNOMON_* environment, TOML file)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

from gnomon.node.config import ConfigError, load
from gnomon.node.ops import logs
from gnomon.node.raft.membership import load_members
from gnomon.node.security.auth import read_admin_token
from gnomon.node.security.certificates import TlsError, load_peer_tls


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["restore"]:
        from gnomon.node.ops.operations import restore_main

        return restore_main(words[1:])
    try:
        config = load(argv)
        load_peer_tls(config.raft_tls_cert, config.raft_tls_key, config.raft_tls_ca,
                      config.node_id)
        if config.admin_token_file:
            read_admin_token(config.admin_token_file)
    except (ConfigError, TlsError, ValueError) as exc:
        print(f"gnomon-node: {exc}", file=sys.stderr)
        return 2
    logs.configure(config.node_id, config.log_format, config.log_level)
    try:
        # The configuration of this node's log wins over the flags (node/raft/DESIGN.md, Membership).
        config = dataclasses.replace(config, members=load_members(config)).validate()
    except ConfigError as exc:
        print(f"gnomon-node: {exc}", file=sys.stderr)
        return 2
    from gnomon.node.server import Node

    asyncio.run(Node(config).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
