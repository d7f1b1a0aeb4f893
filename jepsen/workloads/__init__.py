"""Workloads: what the clients do and which promises their checker reads off the history."""

from __future__ import annotations

from gnomon.jepsen.generator import Workload


def make(name: str) -> Workload:
    from gnomon.jepsen.workloads.fire import FireWorkload
    from gnomon.jepsen.workloads.lease import LeaseWorkload
    from gnomon.jepsen.workloads.register import RegisterWorkload

    table = {"fire": FireWorkload, "lease": LeaseWorkload, "register": RegisterWorkload}
    if name not in table:
        raise ValueError(f"unknown workload {name!r}; known: {sorted(table)}")
    return table[name]()
