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
    "Cancelled",
    "Client",
    "ClusterStatus",
    "Conflict",
    "Consistency",
    "CronSchedule",
    "DeadLetter",
    "DeadlineExceeded",
    "FailedPrecondition",
    "GnomonError",
    "IntervalSchedule",
    "InvalidArgument",
    "Job",
    "JobSpec",
    "MisfirePolicy",
    "NodeStatus",
    "NonRetryableError",
    "NotFound",
    "OnceSchedule",
    "ResourceExhausted",
    "RetryPolicy",
    "Run",
    "RunState",
    "RunTrigger",
    "Schedule",
    "TaskContext",
    "TaskDefinition",
    "TaskInstance",
    "TaskRef",
    "TaskSpec",
    "TaskState",
    "Unauthenticated",
    "Unavailable",
    "Worker",
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


def test_importing_the_client_does_not_import_the_node():
    code = (
        "import sys, gnomon.client, gnomon.client.testing;"
        "bad = [m for m in sys.modules if m.startswith('gnomon.node')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
