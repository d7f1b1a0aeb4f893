"""ListRunsAcrossJobs: the request checked into a core query, and its opaque page token.

Every check names the field and the rule and happens before the read, so a bad request
changes nothing and costs no barrier. The page token is base64url of the last run's sort
value and id plus the sort it was made for (run_query.RunCursor): a token is a position,
not a snapshot, so a run created since the first page shows up where it sorts.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

import grpc

from gnomon.node import codec
from gnomon.node.api.grpc.errors import ServiceError
from gnomon.node.core.run_query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    RunCursor,
    RunFilter,
    RunSort,
)
from gnomon.node.spec.validate import validate_id
from gnomon.v1 import api_pb2, types_pb2

DEFAULT_LATE_MS = 1_000
MAX_PAGE_TOKEN_CHARS = 1_024
MAX_QUEUE_CHARS = 64
_SORTS = {
    api_pb2.RUN_SORT_UNSPECIFIED: RunSort.CREATED_DESC,
    api_pb2.RUN_SORT_CREATED_DESC: RunSort.CREATED_DESC,
    api_pb2.RUN_SORT_CREATED_ASC: RunSort.CREATED_ASC,
    api_pb2.RUN_SORT_DURATION_DESC: RunSort.DURATION_DESC,
    api_pb2.RUN_SORT_DURATION_ASC: RunSort.DURATION_ASC,
}


@dataclass(frozen=True, slots=True)
class RunQuery:
    flt: RunFilter
    sort: str
    limit: int
    after: RunCursor | None


def _bad(detail: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, detail)


def _enum_values(field: str, numbers, enum) -> tuple[str, ...]:
    """The model's names of the enum numbers given; UNSPECIFIED and unknown numbers refused."""
    known = [n for n in enum.DESCRIPTOR.values_by_number if n]
    for number in numbers:
        if number not in known:
            names = ", ".join(enum.Name(n) for n in known)
            raise _bad(f"{field}: must be one of {names}, got {number}")
    return tuple(dict.fromkeys(codec.enum_from_proto(enum.DESCRIPTOR, n, "") for n in numbers))


def _limit(limit: int) -> int:
    if not 0 <= limit <= MAX_LIMIT:
        raise _bad(f"limit: must be between 0 and {MAX_LIMIT} (0 means {DEFAULT_LIMIT}), "
                   f"got {limit}")
    return limit or DEFAULT_LIMIT


def _times(request: api_pb2.ListRunsAcrossJobsRequest) -> tuple[int, int]:
    for name in ("since_ms", "until_ms", "late_ms"):
        if getattr(request, name) < 0:
            raise _bad(f"{name}: must be >= 0 (ms since the epoch; 0: no bound)")
    if request.late_ms and not request.late:
        raise _bad("late_ms: only with late (it sets how late counts as late)")
    if request.since_ms and request.until_ms and request.until_ms <= request.since_ms:
        raise _bad(f"until_ms: must be after since_ms ({request.until_ms} <= "
                   f"{request.since_ms})")
    return request.since_ms, request.until_ms


def _text(field: str, value: str, limit: int) -> str:
    if len(value) > limit or not value.isprintable():
        raise _bad(f"{field}: at most {limit} printable characters")
    return value


def encode_token(cursor: RunCursor, sort: str) -> str:
    raw = json.dumps([sort, cursor.value, cursor.run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, sort: str) -> RunCursor | None:
    """The position `token` names, for a listing in `sort` order ("" : the first page)."""
    if not token:
        return None
    bad = _bad("page_token: not a token this call gave out (pass next_page_token as is)")
    if len(token) > MAX_PAGE_TOKEN_CHARS:
        raise bad
    try:
        made_for, value, run_id = json.loads(
            base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, TypeError):
        raise bad from None
    if not isinstance(value, int) or not isinstance(run_id, str) or made_for not in _SORTS.values():
        raise bad
    if made_for != sort:
        raise _bad(f"page_token: was made for sort {made_for}; keep the sort while paging")
    return RunCursor(value, run_id)


def parse(request: api_pb2.ListRunsAcrossJobsRequest) -> RunQuery:
    """The core query for `request` (tenants already scoped by the access rule)."""
    limit = _limit(request.limit)
    if request.sort not in _SORTS:
        raise _bad(f"sort: must be one of {', '.join(api_pb2.RunSort.keys())}, got "
                   f"{request.sort}")
    sort = _SORTS[request.sort]
    validate_id("job_id", request.job_id, required=False)
    since, until = _times(request)
    for i, tenant in enumerate(request.tenant):
        _text(f"tenant[{i}]", tenant, MAX_QUEUE_CHARS)
    flt = RunFilter(
        tenants=tuple(dict.fromkeys(request.tenant)),
        job_id=request.job_id,
        queue=_text("queue", request.queue, MAX_QUEUE_CHARS),
        states=_enum_values("state", request.state, types_pb2.RunState),
        triggers=_enum_values("trigger", request.trigger, types_pb2.RunTrigger),
        created_since_ms=since,
        created_until_ms=until,
        late_over_ms=(request.late_ms or DEFAULT_LATE_MS) if request.late else None,
        errors_only=request.errors,
    )
    return RunQuery(flt, sort, limit, decode_token(request.page_token, sort))
