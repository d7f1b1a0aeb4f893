"""`gnomon-node`: run one scheduler node (flags, GNOMON_* environment, TOML file)."""

from __future__ import annotations

import asyncio
import logging
import sys

from gnomon.node.config import ConfigError, load


def main(argv: list[str] | None = None) -> int:
    try:
        config = load(argv)
    except ConfigError as exc:
        print(f"gnomon-node: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {config.node_id} %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("pysyncobj").setLevel(logging.ERROR)
    from gnomon.node.server import Node

    asyncio.run(Node(config).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
