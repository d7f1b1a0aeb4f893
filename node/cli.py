"""`gnomon-node`: run one scheduler node (flags, GNOMON_* environment, TOML file)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys

from gnomon.httpguard import descriptors
from gnomon.node.config import ConfigError, load
from gnomon.node.ops import logs
from gnomon.node.process import tune_gc
from gnomon.node.raft.membership import load_members
from gnomon.node.security.auth import read_admin_token
from gnomon.node.security.certificates import TlsError, load_peer_tls

# Every file the node creates (journal, snapshots, history, members, backups, logs of its
# own) is 0600 and every directory 0700, whatever umask it was started with: they hold every
# payload and the hashes of every token.
PRIVATE_UMASK = 0o077


def warn_readable_secrets(config) -> list[str]:
    """A warning per secret file (admin token, TLS keys) that group or others can read, as
    ssh warns of a readable private key; the node still starts."""
    warnings = []
    for name in ("admin_token_file", "tls_key", "raft_tls_key"):
        path = getattr(config, name, "")
        try:
            mode = os.stat(path).st_mode & 0o777 if path else 0
        except OSError:
            continue  # reading it reports the error
        if mode & 0o077:
            warnings.append(f"{name}: {path} is readable by {'group and others' if mode & 0o007 else 'its group'} "
                            f"(mode {mode:04o}); it is a secret: chmod 600 {path}")
    for text in warnings:
        logging.getLogger("gnomon.node.cli").warning("%s", text)
    return warnings


def report_open_file_limit(config, limit: descriptors.OpenFileLimit) -> None:
    """Say what the open-file limit is (raised to the hard one at start) and warn when it
    leaves the HTTP port less than http_max_connections beside the reserved descriptors."""
    logger = logging.getLogger("gnomon.node.cli")
    raised = f" (raised from {limit.before})" if limit.soft != limit.before else ""
    logger.info("open files: soft RLIMIT_NOFILE %d%s, hard %d; %d kept free for the journal, "
                "snapshots and gRPC (reserved_descriptors)", limit.soft, raised, limit.hard,
                config.reserved_descriptors)
    room = limit.soft - config.reserved_descriptors
    if config.http_addr and room < config.http_max_connections:
        logger.warning("open files: RLIMIT_NOFILE %d minus reserved_descriptors %d leaves "
                       "fewer than http_max_connections (%d): the HTTP port refuses "
                       "connections beyond about %d. Raise the hard limit (LimitNOFILE=, "
                       "ulimit -Hn, the container's nofile).", limit.soft,
                       config.reserved_descriptors, config.http_max_connections, max(room, 0))


def main(argv: list[str] | None = None) -> int:
    os.umask(PRIVATE_UMASK)
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["--version"]:
        from gnomon.node.version import VERSION

        print(f"gnomon-node {VERSION}")
        return 0
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
    warn_readable_secrets(config)
    report_open_file_limit(config, descriptors.raise_open_file_limit())
    try:
        # The configuration of this node's log wins over the flags (node/raft/DESIGN.md, Membership).
        config = dataclasses.replace(config, members=load_members(config)).validate()
    except ConfigError as exc:
        print(f"gnomon-node: {exc}", file=sys.stderr)
        return 2
    from gnomon.node.server import Node

    tune_gc()
    asyncio.run(Node(config).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
