"""A job-creation client process: creates its share of a named job set through the API.

    python -m gnomon.bench.jobgen --servers A,B,C --kind interval --params '{...}' \
        --count 100000 --part 0 --parts 2 --out part0.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from gnomon.bench.load import create_jobs_async, spec_for


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", required=True)
    p.add_argument("--kind", required=True)
    p.add_argument("--params", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--part", type=int, default=0)
    p.add_argument("--parts", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    params = {**json.loads(args.params), "count": args.count}
    indices = range(args.part, args.count, args.parts)
    specs = [spec_for(args.kind, i, params) for i in indices]
    prefix = f"{params.get('prefix', args.kind)}-gen"
    # create_jobs_async numbers request ids by position: make them unique per part.
    result = asyncio.run(create_jobs_async(args.servers.split(","), specs,
                                           concurrency=args.concurrency,
                                           prefix=f"{prefix}-p{args.part}of{args.parts}"))
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
