"""What every handler works on (`Ctx`) and the job lookup most slices start with.

The bottom of the core's slices (DESIGN.md, "Slices"): it imports no slice.
"""

from __future__ import annotations

from dataclasses import dataclass

from gnomon.node.core.errors import Code, Rejected
from gnomon.node.core.model import Job, Limits, State
from gnomon.node.core.results import Effects


@dataclass(slots=True)
class Ctx:
    """What a handler works on: the state, this batch's effects and cluster time."""

    state: State
    effects: Effects
    now: int

    @property
    def limits(self) -> Limits:
        return self.state.limits


def _find_job(state: State, job_id: str) -> Job | Rejected:
    job = state.jobs.get(job_id)
    if job is None:
        return Rejected(Code.NOT_FOUND, f"job_id: no job {job_id!r}")
    return job
