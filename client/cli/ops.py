"""The operator's ``gnomon`` commands: leadership transfer, backup, job export/import, and
lists of active runs, queues and workers (with a warning for a queue no worker serves)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .._errors import NotFound
from .backfill_circuits import add_queue_circuit
from .errors import EXIT_OK, EXIT_REFUSED
from .render import fmt_duration, fmt_time, run_json, table
from .spec import spec_from_data, spec_to_data
from .values import UsageError

__all__ = ["DeadlineClient", "OPS_COMMANDS", "QueueInfoLike", "add_job_ops", "add_ops_groups", "add_membership", "add_run_active",
           "add_transfer_leader",
           "add_worker_list", "check_servers", "idle_queue_warnings", "job_document_spec",
           "queues_without_workers",
           "read_spec_documents", "status_from_leader"]

Leaf = Callable[..., argparse.ArgumentParser]


# --- parser ----------------------------------------------------------------------------------


def add_transfer_leader(cluster: Any, leaf: Leaf) -> None:
    p = leaf(cluster, "transfer-leader",
             "hand leadership to another node (before maintenance on the leader)")
    p.add_argument("--to", metavar="NODE", help="node id to lead (default: the most caught-up "
                   "follower)")


def add_membership(cluster: Any, leaf: Leaf) -> None:
    p = leaf(cluster, "add-node",
             "make a running node (started with gnomon-node --join) a voting member, after it "
             "caught up as a learner")
    p.add_argument("node_id", metavar="NODE", help="the new node's id (its certificate names it)")
    p.add_argument("--raft", required=True, metavar="HOST:PORT", help="its Raft address")
    p.add_argument("--grpc", required=True, metavar="HOST:PORT", help="its gRPC address")
    p.add_argument("--http", default="", metavar="HOST:PORT", help="its HTTP API address")
    p.add_argument("--catch-up-timeout", type=float, default=None, metavar="SECONDS",
                   help="how long it may take to catch up (default: the leader's "
                   "membership_catch_up_timeout_ms)")
    p = leaf(cluster, "remove-node", "remove a member (the leader hands over first if it is "
             "the one removed); the removed node stops standing for election")
    p.add_argument("node_id", metavar="NODE")


def add_job_ops(job: Any, leaf: Leaf) -> None:
    p = leaf(job, "export", "print job specs as YAML documents (for GitOps; job import reads "
             "them back)")
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    p = leaf(job, "import", "create or update jobs from YAML documents (job export's form); "
             "idempotent: an unchanged spec is left alone")
    p.add_argument("file", metavar="FILE", help="YAML file of one or more specs (- for stdin)")
    p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    p.add_argument("--batch-size", type=int, default=1000, metavar="N",
                   help="jobs created per call (CreateJobs; at most the cluster's "
                        "create_jobs_max_specs, default 1000)")


def add_run_active(run: Any, leaf: Leaf) -> None:
    p = leaf(run, "active", "runs still running, oldest first")
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")


def add_worker_list(worker: Any, leaf: Leaf) -> None:
    leaf(worker, "list", "workers connected to the leader: queues, credits, leases held")
    p = leaf(worker, "drain", "grant a connected worker nothing more; its leases run to their "
             "end (then stop it once `worker list` shows it holding none)")
    p.add_argument("worker_id", metavar="WORKER", help="the id `gnomon worker list` shows")


def add_ops_groups(groups: Any, leaf: Leaf) -> None:
    backup = groups.add_parser("backup", help="online backup of the replicated state") \
        .add_subparsers(dest="action", metavar="ACTION", required=True)
    p = leaf(backup, "create", "write a consistent backup (state at a committed index, with its "
             "SHA-256) to FILE; restore with gnomon-node restore FILE --data-dir DIR")
    p.add_argument("file", metavar="FILE")
    queue = groups.add_parser("queue", help="queues: backlog, oldest ready age, workers") \
        .add_subparsers(dest="action", metavar="ACTION", required=True)
    leaf(queue, "list", "queues with ready and leased tasks, oldest ready age and workers")
    add_queue_circuit(queue, leaf)


# --- commands --------------------------------------------------------------------------------


def _cmd_transfer_leader(ctx: Any) -> int:
    moved = ctx.client.transfer_leadership(to_node_id=ctx.args.to)
    ctx.emit(f"leader is now {moved.leader_node_id} ({moved.leader_grpc_address}), was "
             f"{moved.previous_leader_node_id}", {
                 "previous_leader_node_id": moved.previous_leader_node_id,
                 "leader_node_id": moved.leader_node_id,
                 "leader_grpc_address": moved.leader_grpc_address, "term": moved.term})
    return EXIT_OK


def _cmd_add_node(ctx: Any) -> int:
    a = ctx.args
    print(f"adding {a.node_id}: it catches up as a learner first, then one membership entry "
          f"makes it a voter ...", file=ctx.err)
    change = ctx.client.add_node(a.node_id, raft_address=a.raft, grpc_address=a.grpc,
                                 http_address=a.http, catch_up_timeout_s=a.catch_up_timeout)
    head = (f"{a.node_id} added (caught up to index {change.match_index} in "
            f"{fmt_duration(change.catch_up_ms)})" if change.changed
            else f"{a.node_id} is a member already: nothing changed")
    return _emit_members(ctx, head, change)


def _cmd_remove_node(ctx: Any) -> int:
    change = ctx.client.remove_node(ctx.args.node_id)
    head = (f"{ctx.args.node_id} removed: stop its process (it refuses to start again with "
            f"its data directory)" if change.changed
            else f"{ctx.args.node_id} is not a member: nothing changed")
    return _emit_members(ctx, head, change)


def _emit_members(ctx: Any, head: str, change: Any) -> int:
    rows = [[m.node_id, m.raft_address, m.grpc_address] for m in change.members]
    ctx.emit(head + "\n" + table(["NODE", "RAFT", "GRPC"], rows), {
        "changed": change.changed, "match_index": change.match_index,
        "catch_up_ms": change.catch_up_ms,
        "members": [{"node_id": m.node_id, "raft_address": m.raft_address,
                     "grpc_address": m.grpc_address} for m in change.members]})
    return EXIT_OK


def _cmd_backup_create(ctx: Any) -> int:
    path = Path(ctx.args.file)
    if path.is_dir():
        raise UsageError(f"{path}: is a directory; name the backup file")
    b = ctx.client.create_backup(path=str(path))
    ctx.emit(f"backup {b.path}: raft index {b.raft_index} (term {b.raft_term}), {b.jobs} jobs, "
             f"{b.runs} runs, {b.size_bytes} bytes\nsha256 {b.sha256}\nrestore: gnomon-node "
             f"restore {b.path} --data-dir DIR --sha256 {b.sha256}", {
                 "path": b.path, "raft_index": b.raft_index, "raft_term": b.raft_term,
                 "jobs": b.jobs, "runs": b.runs, "size_bytes": b.size_bytes,
                 "sha256": b.sha256, "state_digest": b.state_digest})
    return EXIT_OK


def _cmd_job_export(ctx: Any) -> int:
    specs = [spec_to_data(job.spec) for job in ctx.client.iter_jobs(ctx.args.tenant)]
    text = yaml.safe_dump_all(specs, sort_keys=False, allow_unicode=True) if specs else ""
    if ctx.args.output:
        Path(ctx.args.output).write_text(text)
        print(f"exported {len(specs)} job(s) to {ctx.args.output}", file=ctx.err)
    else:
        ctx.out.write(text)
    return EXIT_OK


def read_spec_documents(path: str, text: str | None = None) -> list[dict[str, Any]]:
    """Every YAML document of `path` as a spec mapping (a `job get --json` document is taken
    by its spec)."""
    label = "<stdin>" if path == "-" else path
    try:
        text = text if text is not None else (sys.stdin.read() if path == "-"
                                              else Path(path).read_text())
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except OSError as e:
        raise UsageError(f"{label}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{label}: invalid YAML: {' '.join(str(e).split())}") from None
    return [d["spec"] if isinstance(d, dict) and "job_id" in d and "spec" in d else d
            for d in docs]


# Up to this many specs, import looks each one up by name; above, it lists their tenants once.
_LOOKUP_EACH_MAX = 100


def _cmd_job_import(ctx: Any) -> int:
    a = ctx.args
    label = "<stdin>" if a.file == "-" else a.file
    specs = _import_specs(a.file, label)
    current = _existing_jobs(ctx.client, specs)
    outcome: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": [],
                                     "failed": []}
    to_create = []
    for spec in specs:
        name = f"{spec.tenant}/{spec.name}"
        job = current.get((spec.tenant, spec.name))
        if job is None:
            to_create.append(spec)
        elif spec_to_data(job.spec) == spec_to_data(spec):
            outcome["unchanged"].append(name)
        else:
            if not a.dry_run:
                ctx.client.update_job(job.job_id, spec, expected_version=job.version)
            outcome["updated"].append(name)
    errors = _create_all(ctx, to_create, outcome)
    verb = "would be " if a.dry_run else ""
    lines = [", ".join(f"{len(v)} {verb}{k}" for k, v in outcome.items() if k != "failed"
                       or v)]
    lines += [f"  {k}: {n}" for k, v in outcome.items() if k not in ("unchanged", "failed")
              for n in v]
    lines += [f"  failed: {n}: {e}" for n, e in errors]
    ctx.emit("\n".join(lines), {**outcome, "errors": [{"job": n, "error": e} for n, e in errors],
                                "dry_run": a.dry_run})
    return EXIT_REFUSED if errors else EXIT_OK


def _import_specs(path: str, label: str) -> list[Any]:
    specs = []
    for i, doc in enumerate(read_spec_documents(path)):
        try:
            specs.append(spec_from_data(doc, path=f"document {i + 1}"))
        except UsageError as e:
            raise UsageError(f"{label}: {e}") from None
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        key = (spec.tenant, spec.name)
        if key in seen:
            raise UsageError(f"{label}: job {spec.tenant}/{spec.name} appears twice")
        seen.add(key)
    return specs


def _existing_jobs(client: Any, specs: list[Any]) -> dict[tuple[str, str], Any]:
    """The jobs the specs name that exist: looked up one by one for a few specs, else by
    listing each of their tenants once (a call per page, not per spec)."""
    if len(specs) <= _LOOKUP_EACH_MAX:
        found = {}
        for spec in specs:
            try:
                found[(spec.tenant, spec.name)] = client.get_job(tenant=spec.tenant,
                                                                 name=spec.name)
            except NotFound:
                pass
        return found
    wanted = {(s.tenant, s.name) for s in specs}
    return {(j.tenant, j.name): j for tenant in sorted({s.tenant for s in specs})
            for j in client.iter_jobs(tenant, page_size=1000) if (j.tenant, j.name) in wanted}


def _create_all(ctx: Any, specs: list[Any], outcome: dict[str, list[str]]
                ) -> list[tuple[str, str]]:
    """Create `specs` with bulk calls (CreateJobs, 1000 per call), progress on stderr for
    long imports; (job, error) for the specs that failed."""
    if ctx.args.dry_run or not specs:
        outcome["created"].extend(f"{s.tenant}/{s.name}" for s in specs)
        return []
    key = _digest_all(specs)

    def progress(done: int, total: int) -> None:
        if total > ctx.args.batch_size:
            print(f"created {done:,} of {total:,} jobs", file=ctx.err)

    errors = []
    for r in ctx.client.create_jobs(specs, request_id=f"import:{key}",
                                    batch_size=ctx.args.batch_size, progress=progress):
        name = f"{r.spec.tenant}/{r.spec.name}"
        if r.ok:
            outcome["created"].append(name)
        else:
            outcome["failed"].append(name)
            errors.append((name, str(r.error)))
    return errors


def _digest_all(specs: list[Any]) -> str:
    import hashlib

    h = hashlib.sha256()
    for spec in specs:
        h.update(_digest(spec).encode())
    return h.hexdigest()[:16]


def _digest(spec: Any) -> str:
    import hashlib
    import json

    data = json.dumps(spec_to_data(spec), sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def _cmd_run_active(ctx: Any) -> int:
    runs = ctx.client.list_active_runs(tenant=ctx.args.tenant, limit=ctx.args.limit)
    rows = [[r.run_id, r.tenant, fmt_time(r.scheduled_for_ms),
             " ".join(f"{t.task_name}:{t.state.value}" for t in r.tasks)] for r in runs]
    ctx.emit(table(["RUN", "TENANT", "SCHEDULED FOR", "TASKS"], rows) if rows
             else "no active runs", [run_json(r) for r in runs])
    return EXIT_OK


@dataclass(frozen=True)
class QueueInfoLike:
    """What `idle_queue_warnings` reads of a queue (``QueueInfo`` has these fields)."""

    queue: str
    ready: int = 0
    workers: tuple[str, ...] = ()


def idle_queue_warnings(queues: list[Any]) -> list[str]:
    """One line per queue that has ready tasks and no worker serving it."""
    return [f"warning: queue {q.queue!r} has {q.ready} ready task(s) and no worker "
            f"(start one: gnomon worker shell -q {q.queue})" for q in queues
            if q.ready and not q.workers]


def _cmd_queue_list(ctx: Any) -> int:
    queues = ctx.client.list_queues()
    rows = [[q.queue, q.ready, q.leased,
             fmt_duration(q.oldest_ready_age_ms) if q.oldest_ready_age_ms else "-",
             ",".join(q.workers) or "none"] for q in queues]
    ctx.emit(table(["QUEUE", "READY", "LEASED", "OLDEST READY", "WORKERS"], rows) if rows
             else "no queues with work or workers",
             [{"queue": q.queue, "ready": q.ready, "leased": q.leased,
               "oldest_ready_age_ms": q.oldest_ready_age_ms, "workers": list(q.workers)}
              for q in queues])
    for line in idle_queue_warnings(queues):
        print(line, file=ctx.err)
    return EXIT_OK


def _cmd_worker_list(ctx: Any) -> int:
    workers = ctx.client.list_workers()
    rows = [[w.worker_id, ",".join(w.queues), w.credits, w.leases_held,
             fmt_time(w.connected_ms), fmt_time(w.last_heartbeat_ms) if w.last_heartbeat_ms
             else "none yet", w.peer, "draining" if w.draining else ""] for w in workers]
    ctx.emit(table(["WORKER", "QUEUES", "CREDITS", "LEASES HELD", "CONNECTED",
                    "LAST HEARTBEAT", "CAME THROUGH", "STATE"], rows) if rows
             else "no workers connected", [_worker_json(w) for w in workers])
    return EXIT_OK


def _cmd_worker_drain(ctx: Any) -> int:
    w = ctx.client.drain_worker(ctx.args.worker_id)
    ctx.emit(f"worker {w.worker_id} drained: nothing more is granted to it; it holds "
             f"{w.leases_held} lease(s)", _worker_json(w))
    return EXIT_OK


def _worker_json(w: Any) -> dict[str, Any]:
    return {"worker_id": w.worker_id, "queues": list(w.queues), "credits": w.credits,
            "leases_held": w.leases_held, "connected_ms": w.connected_ms,
            "last_heartbeat_ms": w.last_heartbeat_ms, "peer": w.peer, "draining": w.draining}


OPS_COMMANDS: dict[tuple[str, str | None], Callable[[Any], int]] = {
    ("cluster", "transfer-leader"): _cmd_transfer_leader,
    ("cluster", "add-node"): _cmd_add_node,
    ("cluster", "remove-node"): _cmd_remove_node,
    ("backup", "create"): _cmd_backup_create,
    ("job", "export"): _cmd_job_export,
    ("job", "import"): _cmd_job_import,
    ("run", "active"): _cmd_run_active,
    ("queue", "list"): _cmd_queue_list,
    ("worker", "list"): _cmd_worker_list,
    ("worker", "drain"): _cmd_worker_drain,
}


# --- helpers the other commands call ---------------------------------------------------------


def check_servers(servers: str) -> str:
    """``-s``/GNOMON_SERVERS as host:port[,host:port...]; UsageError for a URL or no port."""
    for part in servers.split(","):
        item = part.strip()
        if "://" in item:
            raise UsageError(f"-s {item}: give host:port (the gRPC port), not a URL")
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"-s {item}: expected host:port, e.g. 127.0.0.1:7701")
    return servers


def status_from_leader(client: Any, node: str | None, include_digest: bool) -> Any:
    """The cluster status as the leader sees it (its match indexes are the meaningful ones),
    whichever node answered first; `node` pins one node (no following)."""
    status = client.cluster_status(server=node, include_digest=include_digest)
    if node or not status.leader_grpc_address or status.leader_node_id == status.node_id:
        return status
    try:
        return client.cluster_status(server=status.leader_grpc_address,
                                     include_digest=include_digest)
    except Exception:  # noqa: BLE001 - the leader moved or is unreachable: show what answered
        return status


def queues_without_workers(client: Any, queues: list[str]) -> list[str]:
    """Warnings for those of `queues` that no connected worker serves (empty if the leader
    cannot be asked, e.g. the caller may not list workers)."""
    try:
        workers = client.list_workers()
    except Exception:  # noqa: BLE001 - a warning is best effort
        return []
    served = {q for w in workers for q in w.queues}
    return [f"warning: no worker serves queue {q!r} yet; its tasks wait until one connects "
            f"(e.g. gnomon worker shell -q {q})" for q in sorted(set(queues)) if q not in served]


def job_document_spec(path: str, text: str | None) -> Any:
    """The spec of a `gnomon job get --json` document in `path` (so that its output reads back
    through `gnomon job create -f`), or None when the file is a plain spec."""
    label = "<stdin>" if path == "-" else path
    try:
        raw = text if text is not None else Path(path).read_text()
        docs = [d for d in yaml.safe_load_all(raw) if d is not None]
    except (OSError, yaml.YAMLError):
        return None  # load_spec_file reports it
    if len(docs) != 1 or not isinstance(docs[0], dict) or not {"job_id", "spec"} <= set(docs[0]):
        return None
    try:
        return spec_from_data(docs[0]["spec"], path="spec")
    except UsageError as e:
        raise UsageError(f"{label}: {e}") from None


class DeadlineClient:
    """The client of one command, bounded as a whole by --timeout: each call is given the
    time that is left of it (a command of several calls, e.g. a read then a write, or status
    from one node then from the leader, ends within --timeout too). Waits for a run
    (``wait_*``) are bounded by --wait-timeout instead, and the calls after a wait get a
    fresh --timeout (reading the run a wait gave up on must not fail because the wait was
    longer than --timeout). Calls with their own ``timeout_s`` are passed as they are."""

    def __init__(self, client: Any, timeout_s: float) -> None:
        import time

        self._client = client
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("wait_") and callable(attr):
            return self._waiting(attr)
        if not callable(attr) or not _takes_timeout(attr):
            return attr

        def bounded(*args: Any, **kwargs: Any) -> Any:
            import time

            if "timeout_s" not in kwargs:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    import grpc

                    from .._errors import DeadlineExceeded

                    raise DeadlineExceeded(
                        f"--timeout {self._timeout_s:g}s passed before the command's next call",
                        code=grpc.StatusCode.DEADLINE_EXCEEDED)
                kwargs["timeout_s"] = remaining
            return attr(*args, **kwargs)

        return bounded

    def _waiting(self, wait: Any) -> Any:
        def waiting(*args: Any, **kwargs: Any) -> Any:
            import time

            try:
                return wait(*args, **kwargs)
            finally:
                self._deadline = time.monotonic() + self._timeout_s

        return waiting


def _takes_timeout(fn: Any) -> bool:
    import inspect

    try:
        return "timeout_s" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
