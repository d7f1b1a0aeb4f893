"""The status-code table and the shape of every client error."""

from __future__ import annotations

import grpc
import pytest

from gnomon.client import (
    AlreadyExists,
    Cancelled,
    Conflict,
    DeadlineExceeded,
    FailedPrecondition,
    GnomonError,
    InvalidArgument,
    NonRetryableError,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from gnomon.client._errors import STATUS_ERRORS, error_for_status

TABLE = [
    (grpc.StatusCode.NOT_FOUND, NotFound),
    (grpc.StatusCode.ALREADY_EXISTS, AlreadyExists),
    (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgument),
    (grpc.StatusCode.OUT_OF_RANGE, InvalidArgument),
    (grpc.StatusCode.FAILED_PRECONDITION, FailedPrecondition),
    (grpc.StatusCode.ABORTED, Conflict),
    (grpc.StatusCode.UNAVAILABLE, Unavailable),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhausted),
    (grpc.StatusCode.UNAUTHENTICATED, Unauthenticated),
    (grpc.StatusCode.PERMISSION_DENIED, PermissionDenied),
    (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceeded),
    (grpc.StatusCode.CANCELLED, Cancelled),
]


@pytest.mark.parametrize(("code", "cls"), TABLE)
def test_status_table(code, cls):
    err = error_for_status(code, "tasks[0].name: must match [A-Za-z0-9_.-]{1,64}")
    assert type(err) is cls
    assert isinstance(err, GnomonError)
    assert err.code is code
    assert str(err) == "tasks[0].name: must match [A-Za-z0-9_.-]{1,64}"
    assert err.message == str(err)


def test_table_is_the_one_above():
    assert dict(TABLE) == STATUS_ERRORS


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNIMPLEMENTED]
)
def test_other_codes_raise_the_base_class(code):
    err = error_for_status(code, "boom")
    assert type(err) is GnomonError
    assert err.code is code


def test_stale_version_reason_is_a_conflict():
    err = error_for_status(
        grpc.StatusCode.FAILED_PRECONDITION, "version is 4, expected 3", reason="VERSION_CONFLICT"
    )
    assert type(err) is Conflict
    assert isinstance(err, FailedPrecondition)
    assert err.reason == "VERSION_CONFLICT"
    other = error_for_status(grpc.StatusCode.FAILED_PRECONDITION, "run is finished", reason="x")
    assert type(other) is FailedPrecondition


def test_a_conflict_is_told_by_its_reason_not_by_its_message():
    # The node sends `gnomon-reason: VERSION_CONFLICT` (node/api/grpc/errors.py); the text is
    # for people and may change.
    err = error_for_status(
        grpc.StatusCode.FAILED_PRECONDITION,
        "expected_version: job 'j1' is at version 4, not 3",
        reason="VERSION_CONFLICT",
    )
    assert type(err) is Conflict
    unmarked = error_for_status(
        grpc.StatusCode.FAILED_PRECONDITION, "expected_version: job 'j1' is at version 4, not 3"
    )
    assert type(unmarked) is FailedPrecondition


def test_builtin_bases():
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(DeadlineExceeded, TimeoutError)
    assert not issubclass(NonRetryableError, GnomonError)


def test_repr_names_the_code():
    err = error_for_status(grpc.StatusCode.NOT_FOUND, "no job j9")
    assert "NOT_FOUND" in repr(err) and "no job j9" in repr(err)
    assert GnomonError("local").code is None


def test_importing_the_sdk_leaves_the_environment_as_it_was():
    """gnomon.client quiets gRPC C-core by setting GRPC_VERBOSITY while grpc loads; left set,
    it reached every process started after (a test's `gnomon --verbose` showed nothing)."""
    import subprocess
    import sys

    code = "import os, gnomon.client; print('GRPC_VERBOSITY' in os.environ)"
    env = {k: v for k, v in __import__("os").environ.items() if k != "GRPC_VERBOSITY"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "False", done.stderr
