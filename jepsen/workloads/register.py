"""register: jobs as registers under create / update (with a version) / read / delete from
several clients, checked for linearizability per job name (checkers/register.py).

Each thread is bound to a node: its reads go there first (a follower must redirect to the
leader); its writes follow the leader. Values are unique per write. After the final heal the
harness reads every key once more; those reads are part of the checked history.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

from gnomon.client import GnomonError
from gnomon.jepsen.checkers import register
from gnomon.jepsen.client import REGISTER_TENANT, register_value
from gnomon.jepsen.context import Context
from gnomon.jepsen.history import FAIL, FINAL, INVOKE, OK

# The final reads of every key together retry for at most this long.
FINAL_READS_S = 60.0


class RegisterWorkload:
    name = "register"
    threads = 4
    stagger_s = 0.15
    keys = tuple(f"r{i}" for i in range(5))

    def __init__(self) -> None:
        self._values = itertools.count(1)
        self._versions: dict[tuple[int, str], int] = {}

    async def setup(self, ctx: Context) -> None:
        return None

    def next_op(self, rng: random.Random, thread: int) -> dict[str, Any] | None:
        key = rng.choice(self.keys)
        roll = rng.random()
        if roll < 0.35:
            return {"f": "read", "key": key}
        if roll < 0.5:
            return {"f": "create", "key": key, "value": next(self._values)}
        known = self._versions.get((thread, key), 0)
        ev = known if known and rng.random() < 0.5 else 0
        if roll < 0.92:
            return {"f": "update", "key": key, "value": next(self._values),
                    "expected_version": ev}
        return {"f": "delete", "key": key, "expected_version": ev}

    def completed(self, thread: int, op: dict[str, Any], result: dict[str, Any]) -> None:
        if result["type"] == OK and isinstance(result.get("value"), dict):
            version = result["value"].get("version")
            if version:
                self._versions[(thread, op["key"])] = version

    async def final(self, ctx: Context) -> None:
        reads = {}
        end = time.monotonic() + FINAL_READS_S
        for key in self.keys:
            for _attempt in range(40):
                if time.monotonic() > end:
                    break
                ctx.history.append(FINAL, INVOKE, "read", {"key": key}, workload=self.name)
                try:
                    job = await ctx.admin.get_job(tenant=REGISTER_TENANT, name=key)
                except GnomonError as exc:
                    error = "not-found" if type(exc).__name__ == "NotFound" else repr(exc)
                    ctx.history.append(FINAL, FAIL, "read", None, error=error,
                                       workload=self.name)
                    if error == "not-found":
                        reads[key] = None
                        break
                    continue
                value = {"job_id": job.job_id, "version": job.version,
                         "value": register_value(job)}
                ctx.history.append(FINAL, OK, "read", value, workload=self.name)
                reads[key] = value
                break
        ctx.finals[self.name] = reads

    def check(self, ctx: Context) -> dict[str, Any]:
        return register.check(ctx.history.snapshot())
