"""The public surface of ``gnomon.client``: pinned, typed, proto-free, node-free."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from pathlib import Path

import gnomon.client
from gnomon.client import testing

PUBLIC = [
    "AlreadyExists",
    "AsyncClient",
    "AsyncRunHandle",
    "Attempt",
    "AttemptOutcome",
    "AuditEntry",
    "Backfill",
    "Cancelled",
    "CircuitBreaker",
    "CircuitState",
    "Client",
    "ClusterLimits",
    "ClusterStatus",
    "Conflict",
    "Consistency",
    "CreateJobResult",
    "CronDialect",
    "CronSchedule",
    "DeadLetter",
    "DeadlineExceeded",
    "DstAmbiguous",
    "DstNonexistent",
    "FailedPrecondition",
    "GnomonError",
    "Identity",
    "IntervalSchedule",
    "InvalidArgument",
    "Job",
    "JobSpec",
    "LeaderChange",
    "LimitsUpdate",
    "MisfirePolicy",
    "NewToken",
    "NodeStatus",
    "NonRetryableError",
    "NotFound",
    "OnceSchedule",
    "OverlapPolicy",
    "PermissionDenied",
    "PreviewFire",
    "QueueCircuit",
    "ReportRefusal",
    "ResourceExhausted",
    "RetryPolicy",
    "Run",
    "RunFailed",
    "RunHandle",
    "RunPage",
    "RunSort",
    "RunState",
    "RunTrigger",
    "RunWait",
    "Schedule",
    "SchedulePreview",
    "TLSConfig",
    "TaskContext",
    "TaskDefinition",
    "TaskInstance",
    "TaskRef",
    "TaskSpec",
    "TaskState",
    "Tenant",
    "Token",
    "Unauthenticated",
    "Unavailable",
    "Worker",
    "WorkerStats",
    "json_payload",
    "task",
]


def test_all_is_pinned():
    assert sorted(gnomon.client.__all__) == PUBLIC
    assert len(set(gnomon.client.__all__)) == len(gnomon.client.__all__)
    for name in PUBLIC:
        assert getattr(gnomon.client, name) is not None


def test_testing_module_surface():
    assert sorted(testing.__all__) == ["make_context", "run_task", "run_task_async"]


def test_py_typed_is_shipped():
    assert (Path(gnomon.client.__file__).parent / "py.typed").is_file()


def _public_callables():
    for name in PUBLIC:
        obj = getattr(gnomon.client, name)
        if inspect.isclass(obj):
            yield obj
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and callable(member):
                    yield member
                if isinstance(member, classmethod | staticmethod):
                    yield member.__func__
            if "__init__" in vars(obj):
                yield obj.__init__
        elif callable(obj):
            yield obj


def test_no_protobuf_type_in_public_signatures():
    for fn in _public_callables():
        try:
            hints = typing.get_type_hints(fn)
        except (TypeError, NameError):
            hints = getattr(fn, "__annotations__", {})
        for hint in hints.values():
            assert "_pb2" not in repr(hint), f"{fn!r} exposes a protobuf type: {hint!r}"


def _calls(cls):
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member)
    }


def test_client_and_async_client_offer_the_same_calls():
    blocking, asynchronous = _calls(gnomon.client.Client), _calls(gnomon.client.AsyncClient)
    assert blocking.keys() == asynchronous.keys()
    for name, sig in asynchronous.items():
        other = blocking[name]
        assert [(p.name, p.kind, p.default) for p in sig.parameters.values()] == [
            (p.name, p.kind, p.default) for p in other.parameters.values()
        ], name


def test_every_public_method_has_a_docstring_of_its_own():
    classes = (
        gnomon.client.Client,
        gnomon.client.AsyncClient,
        gnomon.client.Worker,
        gnomon.client.RunHandle,
        gnomon.client.AsyncRunHandle,
    )
    for cls in classes:
        for name, member in vars(cls).items():
            if name.startswith("_"):
                continue
            doc = (member.fget if isinstance(member, property) else member).__doc__ or ""
            assert doc.strip(), f"{cls.__name__}.{name} has no docstring"
            assert not doc.startswith("See "), f"{cls.__name__}.{name}: {doc!r}"


def test_options_of_public_calls_are_keyword_only():
    # Beyond the subject of a call (a job id, a spec, a run id, tenant, tasks, a node id, a worker
    # id), options are
    # keyword-only, so that adding one never shifts another.
    subjects = {"self", "spec", "specs", "job_id", "run_id", "tenant", "tasks", "servers",
                "node_id", "queue", "worker_id"}
    for cls in (gnomon.client.Client, gnomon.client.AsyncClient):
        for name, sig in _calls(cls).items():
            for p in sig.parameters.values():
                if p.kind is p.POSITIONAL_OR_KEYWORD:
                    assert p.name in subjects, f"{cls.__name__}.{name}({p.name}) is positional"


def test_importing_the_client_does_not_import_the_node():
    code = (
        "import sys, gnomon.client, gnomon.client.testing;"
        "bad = [m for m in sys.modules if m.startswith('gnomon.node')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
