"""HTTP-only views with no RPC yet: queues and workers (their JSON shape is in the OpenAPI
document; an RPC for them would make these views its translation, like the other routes).

Queues are read from the applied state (any node; O(runs in memory)); workers are the leader's
connected streams (a follower knows only the leases the replicated state records).
"""

from __future__ import annotations

from gnomon.node.clock import wall_ms
from gnomon.node.core.model import RunState, TaskState

_COUNTED = {TaskState.PENDING: "pending", TaskState.READY: "ready",
            TaskState.LEASED: "leased", TaskState.RETRY_WAIT: "retryWait"}


def queues(node) -> dict:
    out: dict[str, dict] = {}
    with node.replica.lock:
        st = node.replica.state
        now = max(st.clock_ms, wall_ms())
        for run in st.runs.values():
            if run.state != RunState.RUNNING:
                continue
            queue_of = {t.name: t.queue or "default" for t in run.spec.tasks}
            for inst in run.tasks.values():
                key = _COUNTED.get(inst.state)
                if key is None:
                    continue
                q = out.setdefault(queue_of.get(inst.task_name, "default"), {
                    "queue": queue_of.get(inst.task_name, "default"), "pending": 0,
                    "ready": 0, "leased": 0, "retryWait": 0, "oldestReadyMs": 0})
                q[key] += 1
                if inst.state == TaskState.READY and inst.ready_ms and (
                        not q["oldestReadyMs"] or inst.ready_ms < q["oldestReadyMs"]):
                    q["oldestReadyMs"] = inst.ready_ms
    for q in out.values():
        q["oldestReadyAgeMs"] = max(0, now - q["oldestReadyMs"]) if q["oldestReadyMs"] else 0
    return {"nodeId": node.config.node_id, "clockMs": now,
            "queues": sorted(out.values(), key=lambda q: q["queue"])}


def workers(node) -> dict:
    held: dict[str, int] = {}
    with node.replica.lock:
        for run in node.replica.state.runs.values():
            if run.state != RunState.RUNNING:
                continue
            for inst in run.tasks.values():
                if inst.state == TaskState.LEASED and inst.worker_id:
                    held[inst.worker_id] = held.get(inst.worker_id, 0) + 1
    leader = bool(node.leadership.ready)
    sessions = dict(node.dispatcher.sessions) if leader else {}
    rows = []
    for worker_id in sorted(set(held) | set(sessions)):
        s = sessions.get(worker_id)
        rows.append({"workerId": worker_id, "connected": s is not None,
                     "queues": list(s.queues) if s else [], "credits": s.credits if s else 0,
                     "leasesHeld": held.get(worker_id, 0)})
    return {"nodeId": node.config.node_id, "leader": leader, "workers": rows}
