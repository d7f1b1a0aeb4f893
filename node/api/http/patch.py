"""PATCH /v1/jobs/{job_id}: change the spec fields an update mask names, keep every other.

`PUT` (UpdateJob) replaces the whole spec: a field the body leaves out gets its default. A
client that shows a few fields (the dashboard) would wipe the rest, so PATCH takes
`updateMask`, the paths of the JobSpec fields to change (a google.protobuf.FieldMask in its
JSON form: comma-separated, lowerCamelCase or snake_case, dotted into singular messages:
`"schedule.cron.timezone,priority,tasks"`, or a JSON array of them). A path takes the body's
value; a path the body does not set is cleared to its default. A list (`tasks`) is replaced
whole. A field the body sets that the mask does not name is a 400 (it would be ignored).

The node reads the job (GetJob, authorized as such), merges, and calls UpdateJob with the
merged spec (authorized, validated, deduped and answered exactly as a PUT). Without
`expectedVersion` the update is conditional on the version it merged onto, so a change that
lands in between is refused (FAILED_PRECONDITION, reason VERSION_CONFLICT, as a PUT with a
stale version), never overwritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc
from aiohttp import web
from google.protobuf.message import Message

from gnomon.node.api.http.api import UPDATE_MASK_KEY, HttpContext
from gnomon.node.api.http.auth import authorize
from gnomon.node.api.http.problems import Problem
from gnomon.v1 import api_pb2, types_pb2

if TYPE_CHECKING:
    from gnomon.node.api.http.api import AnyDescriptor

WHERE = "updateMask"


def _bad(detail: str) -> Problem:
    return Problem(grpc.StatusCode.INVALID_ARGUMENT, detail)


def _resolve(desc: AnyDescriptor, path: str) -> str:
    """A mask path (lowerCamelCase or snake_case) as proto field names; 400 if it names no
    field, or goes into a list or a scalar."""
    names = []
    for i, part in enumerate(path.split(".")):
        f = desc.fields_by_name.get(part) or next(
            (x for x in desc.fields if x.json_name == part), None)
        if f is None:
            raise _bad(f"{WHERE}: {path!r}: {desc.full_name} has no field {part!r}")
        names.append(f.name)
        if i < len(path.split(".")) - 1:
            if f.is_repeated:
                raise _bad(f"{WHERE}: {path!r}: {f.name} is a list, replaced whole; name "
                           f"{'.'.join(names)!r}")
            if f.type != f.TYPE_MESSAGE or f.message_type is None:
                raise _bad(f"{WHERE}: {path!r}: {f.name} has no fields")
            desc = f.message_type
    return ".".join(names)


def parse_mask(value: Any, desc: AnyDescriptor = types_pb2.JobSpec.DESCRIPTOR
               ) -> tuple[str, ...]:
    if value is None:
        raise _bad(f"{WHERE}: required: the {desc.name} fields to change, comma-separated "
                   "(\"priority,schedule.cron.timezone\"); PUT replaces the whole spec")
    if isinstance(value, str):
        paths = [p.strip() for p in value.split(",")]
    elif isinstance(value, list) and all(isinstance(p, str) for p in value):
        paths = [p.strip() for p in value]
    else:
        raise _bad(f"{WHERE}: must be a string of comma-separated field paths (or a list of "
                   f"them), not {type(value).__name__}")
    paths = [p for p in paths if p]
    if not paths:
        raise _bad(f"{WHERE}: names no field; name the {desc.name} fields to change")
    return tuple(dict.fromkeys(_resolve(desc, p) for p in paths))


def _clear(msg, path: str) -> None:
    *parents, leaf = path.split(".")
    for name in parents:
        if not msg.HasField(name):
            return
        msg = getattr(msg, name)
    msg.ClearField(leaf)


def _first_set(msg, prefix: str) -> str:
    for f, value in msg.ListFields():
        here = f"{prefix}.{f.name}"
        if f.type == f.TYPE_MESSAGE and not f.is_repeated:
            inner = _first_set(value, here)  # an empty message sets nothing
            if inner:
                return inner
            continue
        return here
    return ""


def check_body(spec, paths: tuple[str, ...], where: str = "spec") -> None:
    """400 when the body sets a field the mask does not name (it would be ignored)."""
    rest = type(spec)()
    rest.CopyFrom(spec)
    for path in paths:
        _clear(rest, path)
    extra = _first_set(rest, where)
    if extra:
        raise _bad(f"{extra}: set in the body but not named in {WHERE} (add it to change it, "
                   "or leave it out)")


def merge(base, body, paths: tuple[str, ...]):
    """`base` with each masked path taken from `body` (a new message)."""
    out = type(base)()
    out.CopyFrom(base)
    for path in paths:
        *parents, leaf = path.split(".")
        src, dst = body, out
        for name in parents:
            src, dst = getattr(src, name), getattr(dst, name)
        f = dst.DESCRIPTOR.fields_by_name[leaf]
        if f.is_repeated:
            dst.ClearField(leaf)
            getattr(dst, leaf).extend(getattr(src, leaf))
        elif f.type == f.TYPE_MESSAGE:
            if src.HasField(leaf):
                getattr(dst, leaf).CopyFrom(getattr(src, leaf))
            else:
                dst.ClearField(leaf)
        elif f.has_presence and not src.HasField(leaf):
            dst.ClearField(leaf)
        else:
            setattr(dst, leaf, getattr(src, leaf))
    return out


async def merged_update(node, servicer, request: web.Request,
                        msg: Message) -> api_pb2.UpdateJobRequest:
    """The UpdateJob request a PATCH stands for: the job's current spec with the masked
    paths of the body's (raises a Problem: a bad mask, or GetJob's own answer)."""
    assert isinstance(msg, api_pb2.UpdateJobRequest), "PATCH routes are UpdateJob's"
    paths = parse_mask(request.get(UPDATE_MASK_KEY))
    check_body(msg.spec, paths)
    get = api_pb2.GetJobRequest(job=msg.job)
    context = HttpContext()
    access = await authorize(node, "JobService", "GetJob", request, get, context)
    context.metadata = access.metadata
    current = (await servicer.GetJob(get, context)).job
    out = api_pb2.UpdateJobRequest()
    out.CopyFrom(msg)
    out.spec.CopyFrom(merge(current.spec, msg.spec, paths))
    if not out.expected_version:
        out.expected_version = current.version
    return out
