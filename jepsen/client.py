"""Jepsen clients: turn operations (plain dicts) into gnomon client calls and outcomes.

An outcome is `ok` (it happened; `value` has what the cluster answered), `fail` (it certainly
did not happen: a business rejection, or any error of a read) or `info` (a write whose outcome
is unknown: it timed out or the cluster was unavailable; it may still take effect).

Client chaos (`op["chaos"]`): the call runs on a client whose attempts time out after a few
milliseconds, so the SDK retries the same request id while the first attempt may still commit,
and a mutating call is then sent a second time with the same request id. Both answers are
recorded: a retried request id must have one effect and get the same answer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from gnomon.client import (
    AlreadyExists,
    AsyncClient,
    Conflict,
    FailedPrecondition,
    GnomonError,
    InvalidArgument,
    JobSpec,
    NotFound,
    OnceSchedule,
    ResourceExhausted,
    Run,
    TaskSpec,
)

REGISTER_TENANT = "reg"
REGISTER_QUEUE = "reg"
# Register jobs never fire: paused, one shot in 2100.
FAR_FUTURE_MS = 4_102_444_800_000
WRITES = frozenset({"create", "update", "delete", "trigger"})
DEFINITE = {NotFound: "not-found", AlreadyExists: "already-exists", Conflict: "conflict",
            FailedPrecondition: "failed-precondition", InvalidArgument: "invalid-argument",
            ResourceExhausted: "resource-exhausted"}


def outcome(type_: str, value: Any = None, error: str | None = None) -> dict[str, Any]:
    return {"type": type_, "value": value, "error": error}


def error_name(exc: GnomonError) -> str:
    for cls, name in DEFINITE.items():
        if isinstance(exc, cls):
            return name
    code = getattr(exc, "code", None)
    return code.name.lower().replace("_", "-") if code is not None else type(exc).__name__


def is_definite(exc: GnomonError) -> bool:
    return any(isinstance(exc, cls) for cls in DEFINITE)


def register_spec(key: str, value: int) -> JobSpec:
    return JobSpec(name=key, tenant=REGISTER_TENANT, schedule=OnceSchedule(FAR_FUTURE_MS),
                   tasks=(TaskSpec(name="t", queue=REGISTER_QUEUE, payload={"v": value}),),
                   paused=True)


def register_value(job) -> int | None:
    try:
        return json.loads(job.spec.tasks[0].payload or b"{}").get("v")
    except (ValueError, IndexError):
        return None


def run_summary(run: Run) -> list[Any]:
    """[run_id, state, scheduled_for_ms, trigger, created_ms, finished_ms,
    [[task, state, token, worker], ...], reason]"""
    return [run.run_id, str(run.state), run.scheduled_for_ms, str(run.trigger), run.created_ms,
            run.finished_ms,
            [[t.task_name, str(t.state), t.fencing_token, t.worker_id] for t in run.tasks],
            run.reason]


class JepsenClient:
    """One per client process group; `servers` lists the process's own node first."""

    def __init__(self, servers: list[str], *, read_server: str | None = None,
                 timeout_s: float = 5.0):
        self.client = AsyncClient(servers, timeout_s=timeout_s, attempt_timeout_s=1.5,
                                  retries=20, backoff_max_s=0.5)
        # Reads go to the process's own node first; a follower redirects to the leader.
        self.reader = AsyncClient([read_server] if read_server else servers,
                                  timeout_s=timeout_s, attempt_timeout_s=1.5, retries=20,
                                  backoff_max_s=0.5)
        self.chaos = AsyncClient(servers, timeout_s=timeout_s, attempt_timeout_s=0.01,
                                 retries=100, backoff_initial_s=0.005, backoff_max_s=0.1)

    async def close(self) -> None:
        for c in (self.client, self.reader, self.chaos):
            await c.close()

    async def invoke(self, op: dict[str, Any]) -> dict[str, Any]:
        f = op["f"]
        handler = HANDLERS.get(f)
        if handler is None:
            return outcome("fail", error=f"unknown op {f!r}")
        chaos = bool(op.get("chaos")) and f in WRITES
        client = self.chaos if chaos else (self.reader if f in ("read", "read-runs")
                                            else self.client)
        request_id = uuid.uuid4().hex
        first = await self._once(handler, client, op, request_id)
        if not chaos:
            return first
        # The same request again, as a client that never saw the first answer would send it.
        second = await self._once(handler, self.client, op, request_id)
        # One logical operation: it took effect if either send says so; it is unknown if
        # either is (a pre-apply rejection does not stop an earlier send from committing).
        oks = [r for r in (first, second) if r["type"] == "ok"]
        infos = [r for r in (first, second) if r["type"] == "info"]
        result = (oks or infos or [first])[0]
        value = dict(result["value"] or {})
        value["replies"] = [_brief(first), _brief(second)]
        value["request_id"] = request_id
        return {**result, "value": value}

    async def _once(self, handler: Handler, client: AsyncClient, op: dict[str, Any],
                    request_id: str) -> dict[str, Any]:
        try:
            return outcome("ok", await handler(client, op, request_id))
        except GnomonError as exc:
            if is_definite(exc) or op["f"] not in WRITES:
                return outcome("fail", error=error_name(exc))
            return outcome("info", error=error_name(exc))


def _brief(o: dict[str, Any]) -> dict[str, Any]:
    value = o["value"] or {}
    return {"type": o["type"], "error": o["error"],
            **{k: value[k] for k in ("job_id", "version", "run_id") if k in value}}


Handler = Callable[[AsyncClient, dict[str, Any], str], Awaitable[Any]]


async def _create(c: AsyncClient, op: dict[str, Any], rid: str) -> Any:
    job = await c.create_job(register_spec(op["key"], op["value"]), request_id=rid)
    return {"job_id": job.job_id, "version": job.version}


async def _update(c: AsyncClient, op: dict[str, Any], rid: str) -> Any:
    job = await c.update_job(None, register_spec(op["key"], op["value"]),
                             expected_version=op.get("expected_version", 0), request_id=rid)
    return {"job_id": job.job_id, "version": job.version, "value": register_value(job)}


async def _delete(c: AsyncClient, op: dict[str, Any], rid: str) -> Any:
    await c.delete_job(tenant=REGISTER_TENANT, name=op["key"],
                       expected_version=op.get("expected_version", 0), request_id=rid)
    return {}


async def _read(c: AsyncClient, op: dict[str, Any], rid: str) -> Any:
    job = await c.get_job(tenant=REGISTER_TENANT, name=op["key"])
    return {"job_id": job.job_id, "version": job.version, "value": register_value(job)}


async def _read_runs(c: AsyncClient, op: dict[str, Any], rid: str) -> Any:
    runs = await c.list_runs(op["job_id"], limit=op.get("limit", 20))
    return {"runs": [run_summary(r) for r in runs]}


async def _trigger(c: AsyncClient, op: dict[str, Any], rid: str) -> Any:
    run = await c.trigger_job(op["job_id"], request_id=rid)
    return {"run_id": run.run_id}


HANDLERS: dict[str, Handler] = {
    "create": _create, "update": _update, "delete": _delete, "read": _read,
    "read-runs": _read_runs, "trigger": _trigger,
}
