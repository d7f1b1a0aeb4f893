"""Bytes fields as JSON over HTTP: task payloads, task results, a run's parameters.

The proto's `bytes` fields (TaskSpec.payload, TaskInstance.result, Run.params) mostly hold
JSON, and canonical proto JSON would write them as base64. The HTTP API writes a bytes field
`x` the way the CLI's job files write a payload (client/cli/spec.py), so a JSON payload reads
and writes as JSON:

- `x`: a JSON value (object, array, number, true, false), stored as its UTF-8 JSON text,
  compact with sorted keys (the client's `json_payload`: equal values, equal bytes); `null`
  is no bytes. A JSON *string* is base64 of raw bytes, as canonical proto JSON has it, so
  clients written for the base64 shape keep working (a string is never a JSON payload).
- `xBase64` (or `x_base64`): raw bytes, base64 (standard or URL-safe alphabet, padding
  optional). Not together with `x`.

Answers write `x` as the JSON value when the bytes are UTF-8 JSON text that is not a bare
string or `null` (`null` when there are no bytes), else `xBase64` and no `x`. So an answer's
field, sent back, gives the same bytes when they were written through the HTTP API, the CLI
or the client's `json_payload`; other JSON text (whitespace, key order) comes back equal as
JSON, compact.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from typing import TYPE_CHECKING, Any

import grpc

from gnomon.node.api.http.problems import Problem

if TYPE_CHECKING:
    from gnomon.node.api.http.api import AnyDescriptor, AnyFieldDescriptor

JSON_SUFFIX = "Base64"  # lowerCamelCase: payloadBase64; proto-name form: payload_base64
_B64 = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}$")


def _bad(where: str, rule: str) -> Problem:
    return Problem(grpc.StatusCode.INVALID_ARGUMENT, f"{where}: {rule}")


def json_bytes(value: Any, where: str) -> bytes:
    """A JSON value's bytes as stored: compact, sorted keys, UTF-8 (client json_payload)."""
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                          allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise _bad(where, f"not representable as JSON ({exc})") from None


def base64_bytes(text: Any, where: str) -> bytes:
    if not isinstance(text, str):
        raise _bad(where, f"must be a base64 string, not {type(text).__name__}")
    if not _B64.match(text) or len(text.rstrip("=")) % 4 == 1:
        raise _bad(where, "not base64 (A-Z a-z 0-9 + / or - _, padding optional)")
    bare = text.translate(str.maketrans("-_", "+/")).rstrip("=")
    try:
        raw = base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)
    except binascii.Error as exc:
        raise _bad(where, f"not base64 ({exc})") from None
    # Encoders write the unused low bits of the last character as zeros; text that only
    # looks like base64 ("orders") seldom does.
    if base64.b64encode(raw).decode().rstrip("=") != bare:
        raise _bad(where, "not base64 (the last character has bits beyond the data)")
    return raw


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def as_json(value: bytes) -> tuple[bool, Any]:
    """(True, the JSON value) when `value` reads back as it is shown (see the module doc);
    (False, base64 text) otherwise."""
    if not value:
        return True, None
    try:
        parsed = json.loads(value.decode(), object_pairs_hook=_unique,
                            parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        parsed = None
    if parsed is None or isinstance(parsed, str):
        return False, base64.b64encode(value).decode()
    return True, parsed


@functools.cache
def _bytes_within(desc: AnyDescriptor) -> bool:
    """Whether a message has a bytes field, itself or in a message it holds."""
    seen: set[str] = set()

    def walk(d: AnyDescriptor) -> bool:
        if d.full_name in seen:
            return False
        seen.add(d.full_name)
        for f in d.fields:
            if f.type == f.TYPE_BYTES:
                return True
            if f.type == f.TYPE_MESSAGE and f.message_type is not None and walk(f.message_type):
                return True
        return False

    return walk(desc)


def _field_of(desc: AnyDescriptor, key: str) -> AnyFieldDescriptor | None:
    f = desc.fields_by_name.get(key)
    if f is None:
        f = next((x for x in desc.fields if x.json_name == key), None)
    return f


def _base64_key(desc: AnyDescriptor, key: str) -> AnyFieldDescriptor | None:
    """The bytes field that `payloadBase64` / `payload_base64` names, if any."""
    for suffix in (JSON_SUFFIX, "_base64"):
        if key.endswith(suffix) and key != suffix:
            f = _field_of(desc, key[: -len(suffix)])
            if f is not None and f.type == f.TYPE_BYTES:
                return f
    return None


def _value_in(f: AnyFieldDescriptor, value: Any, where: str, from_base64: bool) -> str | None:
    """A request's value of bytes field `f` as the base64 text json_format reads."""
    if from_base64:
        raw = base64_bytes(value, where)
    elif value is None:
        return None
    elif isinstance(value, str):
        # The base64 of canonical proto JSON: what clients of the base64 shape send.
        try:
            raw = base64_bytes(value, where)
        except Problem:
            raise _bad(where, f"a string is base64 of raw bytes, and {_short(value)} is not "
                              f"base64; send JSON as a JSON value (an object, array, number), "
                              f"raw bytes as base64 in {f.json_name}{JSON_SUFFIX}") from None
    else:
        raw = json_bytes(value, where)
    return base64.b64encode(raw).decode()


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:39] + "…")


def request_in(desc: AnyDescriptor, data: Any, where: str = "") -> Any:
    """A request body (the JSON of message `desc`) with every bytes field's JSON form turned
    into what json_format.ParseDict reads (base64); other keys as they are (ParseDict judges
    them). Raises a 400 Problem naming the field (`spec.tasks[0].payload`)."""
    if not isinstance(data, dict) or not _bytes_within(desc):
        return data
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # bytes field name -> the key that set it
    for key, value in data.items():
        b64 = _base64_key(desc, key)
        f = b64 or _field_of(desc, key)
        if f is None:
            out[key] = value
            continue
        at = f"{where}.{f.name}" if where else f.name
        if f.type == f.TYPE_BYTES:
            if b64 is not None:
                at += "_base64"
            if f.name in given:
                raise _bad(at, f"set {f.name} or {f.name}_base64, not both")
            given[f.name] = key
            if f.is_repeated and isinstance(value, list):
                converted: Any = [_value_in(f, v, f"{at}[{i}]", b64 is not None)
                                  for i, v in enumerate(value)]
            else:
                converted = _value_in(f, value, at, b64 is not None)
            if converted is not None:
                out[f.json_name] = converted
            continue
        sub = f.message_type if f.type == f.TYPE_MESSAGE else None
        if sub is None or not _bytes_within(sub):
            out[key] = value
        elif sub.GetOptions().map_entry:
            vf = sub.fields_by_name["value"]
            vdesc = vf.message_type if vf.type == vf.TYPE_MESSAGE else None
            out[key] = ({k: request_in(vdesc, v, f"{at}[{k!r}]") for k, v in value.items()}
                        if vdesc is not None and isinstance(value, dict) else value)
        elif f.is_repeated and isinstance(value, list):
            out[key] = [request_in(sub, v, f"{at}[{i}]") for i, v in enumerate(value)]
        else:
            out[key] = request_in(sub, value, at)
    return out


def answer_out(desc: AnyDescriptor, data: dict[str, Any]) -> dict[str, Any]:
    """An answer's canonical proto JSON (MessageToDict of message `desc`), every bytes field
    in its JSON form (in place; returned)."""
    if not _bytes_within(desc):
        return data
    for f in desc.fields:
        if f.json_name not in data:
            continue
        value = data[f.json_name]
        if f.type == f.TYPE_BYTES:
            if f.is_repeated:  # no repeated bytes field is served; base64 as proto JSON
                continue
            ok, shown = as_json(base64.b64decode(value))
            if ok:
                data[f.json_name] = shown
            else:
                del data[f.json_name]
                data[f.json_name + JSON_SUFFIX] = shown
            continue
        sub = f.message_type if f.type == f.TYPE_MESSAGE else None
        if sub is None or not _bytes_within(sub):
            continue
        if sub.GetOptions().map_entry:
            vf = sub.fields_by_name["value"]
            if vf.type == vf.TYPE_MESSAGE and vf.message_type is not None:
                for v in value.values():
                    answer_out(vf.message_type, v)
        elif f.is_repeated:
            for v in value:
                answer_out(sub, v)
        else:
            answer_out(sub, value)
    return data
