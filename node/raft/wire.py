"""Wire format of the Raft port: length-prefixed frames carrying pysyncobj's messages in a
small binary codec of our own (no pickle, no zlib; node/raft/DESIGN.md).

frame   := u32 length (big-endian) | payload          length 0 is a keep-alive ping
payload := value                                       (one message dict per frame)
value   := 0x00                                        None
         | 0x01 | 0x02                                 False | True
         | 0x03 i8 | 0x04 i64                           int (signed, big-endian)
         | 0x05 f64                                    float (IEEE 754, big-endian)
         | 0x06 u32 n, n bytes                         bytes
         | 0x07 u32 n, n bytes of UTF-8                str
         | 0x08 u32 n, n values                        list
         | 0x09 u32 n, n values                        tuple
         | 0x0A u32 n, n (str value, value) pairs      dict with str keys, no duplicates

`decode` is total: for any input it returns a value built only from the types above or
raises `CodecError`; it never calls anything chosen by the input (no classes, no
constructors, no globals), allocates no more than the input's length, and nests at most
`MAX_DEPTH` containers. `check_message` then checks the shape of each pysyncobj message kind
so that a malformed message from an authenticated peer is refused here instead of raising
inside pysyncobj's tick.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

__all__ = [
    "CodecError", "FrameReader", "FrameTooLarge", "MAX_DEPTH", "PING", "check_message",
    "decode", "encode", "encode_frame", "frame",
]

MAX_DEPTH = 8  # the deepest real message: dict > entries list > entry tuple (3)

_NONE, _FALSE, _TRUE, _I8, _I64, _F64, _BYTES, _STR, _LIST, _TUPLE, _DICT = range(11)
_LEN = struct.Struct(">I")
_I64S = struct.Struct(">q")
_F64S = struct.Struct(">d")
_I8S = struct.Struct(">b")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_MAX_LEN = (1 << 32) - 1
# Encoded short strings (message keys and type names repeat in every message).
_STR_CACHE: dict[str, bytes] = {}
_STR_CACHE_MAX = 1024
_STR_CACHE_LEN = 64

PING = _LEN.pack(0)


class CodecError(ValueError):
    """Bytes that are not a valid message, or a value the codec cannot carry."""


class FrameTooLarge(CodecError):
    """A frame header announced more than the connection's limit."""


# -- encoding -----------------------------------------------------------------------------


def encode(value: object) -> bytes:
    """The payload for one value (raises CodecError for a type the codec does not carry)."""
    out = bytearray()
    _enc(value, out, 0)
    return bytes(out)


def frame(payload: bytes) -> bytes:
    """One frame: the length prefix and the payload."""
    if len(payload) > _MAX_LEN:
        raise CodecError(f"payload of {len(payload)} bytes does not fit a frame")
    return _LEN.pack(len(payload)) + payload


def encode_frame(value: object) -> bytearray:
    """`frame(encode(value))` without copying the payload (the hot path)."""
    out = bytearray(4)
    _enc(value, out, 0)
    if len(out) - 4 > _MAX_LEN:
        raise CodecError(f"payload of {len(out) - 4} bytes does not fit a frame")
    _LEN.pack_into(out, 0, len(out) - 4)
    return out


def _enc_str(value: str) -> bytes:
    cached = _STR_CACHE.get(value)
    if cached is not None:
        return cached
    raw = value.encode("utf-8")
    if len(raw) > _MAX_LEN:
        raise CodecError("string too long")
    enc = bytes((_STR,)) + _LEN.pack(len(raw)) + raw
    if len(value) <= _STR_CACHE_LEN and len(_STR_CACHE) < _STR_CACHE_MAX:
        _STR_CACHE[value] = enc
    return enc


def _enc(value: object, out: bytearray, depth: int) -> None:
    kind = type(value)
    if kind is str:
        out += _enc_str(value)  # type: ignore[arg-type]
    elif kind is int:
        if -128 <= value <= 127:  # type: ignore[operator]
            out.append(_I8)
            out += _I8S.pack(value)
        elif _INT_MIN <= value <= _INT_MAX:  # type: ignore[operator]
            out.append(_I64)
            out += _I64S.pack(value)
        else:
            raise CodecError(f"int {value} does not fit 64 bits")
    elif kind is bool:
        out.append(_TRUE if value else _FALSE)
    elif kind is bytes or kind is bytearray or kind is memoryview:
        # `kind is ...` does not narrow `value` for mypy (nor does any test on `kind` here).
        n = len(value) if kind is not memoryview else value.nbytes  # type: ignore[arg-type, attr-defined]
        if n > _MAX_LEN:
            raise CodecError("bytes too long")
        out.append(_BYTES)
        out += _LEN.pack(n)
        out += value  # type: ignore[arg-type]
    elif value is None:
        out.append(_NONE)
    elif kind is dict:
        if depth >= MAX_DEPTH:
            raise CodecError(f"nested deeper than {MAX_DEPTH}")
        out.append(_DICT)
        out += _LEN.pack(len(value))  # type: ignore[arg-type]
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                raise CodecError(f"dict key {key!r} is not a str")
            out += _enc_str(key)
            _enc(item, out, depth + 1)
    elif kind is list or kind is tuple:
        if depth >= MAX_DEPTH:
            raise CodecError(f"nested deeper than {MAX_DEPTH}")
        out.append(_LIST if kind is list else _TUPLE)
        out += _LEN.pack(len(value))  # type: ignore[arg-type]
        for item in value:  # type: ignore[attr-defined]
            _enc(item, out, depth + 1)
    elif kind is float:
        out.append(_F64)
        out += _F64S.pack(value)
    else:
        raise CodecError(f"cannot encode a {kind.__name__}")


# -- decoding -----------------------------------------------------------------------------


def decode(data: bytes | bytearray | memoryview) -> object:
    """The value in `data` (exactly one, nothing after it), or CodecError."""
    buf = bytes(data)
    try:
        value, pos = _dec(buf, 0, 0)
    except CodecError:
        raise
    except (struct.error, IndexError, UnicodeDecodeError, ValueError, TypeError,
            RecursionError, OverflowError, MemoryError) as exc:
        # Belt and braces: the checks below should leave nothing to land here.
        raise CodecError(f"malformed payload ({type(exc).__name__})") from None
    if pos != len(buf):
        raise CodecError(f"{len(buf) - pos} bytes after the value")
    return value


def _short(pos: int, n: int) -> CodecError:
    return CodecError(f"truncated at byte {pos}: {n} more bytes needed")


_unpack_len = _LEN.unpack_from
_unpack_i64 = _I64S.unpack_from
_unpack_i8 = _I8S.unpack_from
_unpack_f64 = _F64S.unpack_from


def _dec(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    # One function, checks inline: this runs for every field of every message.
    end = len(buf)
    if pos >= end:
        raise _short(pos, 1)
    tag = buf[pos]
    pos += 1
    if tag == _STR or tag == _BYTES:
        if pos + 4 > end:
            raise _short(pos, 4)
        n = _unpack_len(buf, pos)[0]
        pos += 4
        if pos + n > end:
            raise _short(pos, n)
        raw = buf[pos:pos + n]
        if tag == _BYTES:
            return raw, pos + n
        try:
            return raw.decode("utf-8"), pos + n
        except UnicodeDecodeError:
            raise CodecError(f"string at byte {pos} is not valid UTF-8") from None
    if tag == _I8:
        if pos + 1 > end:
            raise _short(pos, 1)
        return _unpack_i8(buf, pos)[0], pos + 1
    if tag == _I64:
        if pos + 8 > end:
            raise _short(pos, 8)
        return _unpack_i64(buf, pos)[0], pos + 8
    if tag == _FALSE:
        return False, pos
    if tag == _TRUE:
        return True, pos
    if tag == _NONE:
        return None, pos
    if tag == _LIST or tag == _TUPLE or tag == _DICT:
        if depth >= MAX_DEPTH:
            raise CodecError(f"nested deeper than {MAX_DEPTH}")
        if pos + 4 > end:
            raise _short(pos, 4)
        n = _unpack_len(buf, pos)[0]
        pos += 4
        # Every element takes at least one byte (a dict pair at least 6): a count larger
        # than what is left is refused before anything is allocated.
        if pos + n * (6 if tag == _DICT else 1) > end:
            raise CodecError(f"count {n} at byte {pos - 4} exceeds the bytes left")
        depth += 1
        if tag == _DICT:
            out: dict[str, object] = {}
            for _ in range(n):
                # Keys inline: always a str.
                if pos + 5 > end:
                    raise _short(pos, 5)
                if buf[pos] != _STR:
                    raise CodecError(f"dict key at byte {pos} is not a str")
                k = _unpack_len(buf, pos + 1)[0]
                pos += 5
                if pos + k > end:
                    raise _short(pos, k)
                try:
                    key = buf[pos:pos + k].decode("utf-8")
                except UnicodeDecodeError:
                    raise CodecError(f"dict key at byte {pos} is not valid UTF-8") from None
                if key in out:
                    raise CodecError(f"duplicate dict key {key!r}")
                out[key], pos = _dec(buf, pos + k, depth)
            return out, pos
        items: list[object] = []
        append = items.append
        for _ in range(n):
            item, pos = _dec(buf, pos, depth)
            append(item)
        return (items if tag == _LIST else tuple(items)), pos
    if tag == _F64:
        if pos + 8 > end:
            raise _short(pos, 8)
        return _unpack_f64(buf, pos)[0], pos + 8
    raise CodecError(f"unknown tag 0x{tag:02x} at byte {pos - 1}")


# -- frames -------------------------------------------------------------------------------


class FrameReader:
    """Splits a byte stream into frames of at most `limit` payload bytes.

    `pop` checks a frame's header against the limit in force when it is popped (the limit
    rises once a peer is authenticated) and raises FrameTooLarge as soon as a header
    announces more, before any of that frame's body is kept; at most one incomplete frame
    and the bytes of one `push` are held.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self._buf = bytearray()
        self._need = -1  # payload length of the frame being read, -1 before its header

    def push(self, data: bytes) -> None:
        """Add received bytes (then `pop` until it returns None)."""
        self._buf += data

    def pop(self) -> bytes | None:
        """The next complete payload (b"" for a ping), or None until more bytes arrive."""
        buf = self._buf
        if self._need < 0:
            if len(buf) < 4:
                return None
            (n,) = _unpack_len(buf, 0)
            if n > self.limit:
                buf.clear()
                raise FrameTooLarge(f"a frame of {n} bytes announced (limit {self.limit})")
            del buf[:4]
            self._need = n
        n = self._need
        if len(buf) < n:
            return None
        self._need = -1
        with memoryview(buf) as view:
            payload = bytes(view[:n])
        del buf[:n]
        return payload

    def feed(self, data: bytes) -> list[bytes]:
        """`push` then every complete payload, all checked against the current limit."""
        self.push(data)
        out = []
        while (payload := self.pop()) is not None:
            out.append(payload)
        return out

    @property
    def buffered(self) -> int:
        """Bytes held for the frame being read."""
        return len(self._buf)


# -- message shapes -----------------------------------------------------------------------

# A check takes a field's value and says whether it has the right shape.
_Check = Callable[[object], bool]


def _is_int(v: object) -> bool:
    return type(v) is int


def _is_bool(v: object) -> bool:
    return type(v) is bool


def _is_bytes(v: object) -> bool:
    return type(v) is bytes


def _is_entry(v: object) -> bool:
    return (type(v) in (tuple, list) and len(v) == 3 and type(v[0]) is bytes  # type: ignore[arg-type, index]
            and type(v[1]) is int and type(v[2]) is int)  # type: ignore[index]


def _is_entries(v: object) -> bool:
    return type(v) is list and all(_is_entry(e) for e in v)


def _is_snapshot_chunk(v: object) -> bool:
    # (chunk, is_first, is_last) from the snapshot sender, or None (nothing to send now).
    return v is None or (type(v) in (tuple, list) and len(v) == 3  # type: ignore[arg-type]
                         and type(v[0]) is bytes and type(v[1]) is bool  # type: ignore[index]
                         and type(v[2]) is bool)  # type: ignore[index]


# message type -> (required fields, optional fields), from pysyncobj 0.3.17's syncobj.py.
_SHAPES: dict[str, tuple[dict[str, _Check], dict[str, _Check]]] = {
    "request_vote": ({"term": _is_int, "last_log_index": _is_int, "last_log_term": _is_int}, {}),
    "response_vote": ({"term": _is_int}, {}),
    # No "transmission"/"data": pysyncobj sends an entry larger than its batch size in
    # pickled pieces; the config keeps every entry below it (node/raft/DESIGN.md), so a peer
    # that sends pieces is refused before anything is unpickled.
    "append_entries": ({"term": _is_int, "commit_index": _is_int}, {
        "entries": _is_entries, "prevLogIdx": _is_int, "prevLogTerm": _is_int,
        "serialized": _is_snapshot_chunk}),
    "next_node_idx": ({"next_node_idx": _is_int, "reset": _is_bool, "success": _is_bool}, {}),
    "apply_command": ({"command": _is_bytes}, {"request_id": _is_int}),
    "apply_command_response": ({"request_id": _is_int}, {
        "error": _is_int, "log_idx": _is_int, "log_term": _is_int}),
    "timeout_now": ({"term": _is_int}, {}),
    # gnomon's PreVote (node/raft/prevote.py): pysyncobj never sees these.
    "pre_vote": ({"term": _is_int, "last_log_index": _is_int, "last_log_term": _is_int}, {}),
    "pre_vote_response": ({"term": _is_int, "granted": _is_bool}, {}),
}


def check_message(message: object) -> dict:
    """`message` if it has the shape of a pysyncobj message, else CodecError naming the field."""
    if type(message) is not dict:
        raise CodecError(f"message is a {type(message).__name__}, not a dict")
    kind = message.get("type")
    shape = _SHAPES.get(kind) if type(kind) is str else None
    if shape is None:
        raise CodecError(f"unknown message type {kind!r}")
    required, optional = shape
    for name, ok in required.items():
        if name not in message or not ok(message[name]):
            raise CodecError(f"{kind}.{name}: missing or malformed")
    for name, value in message.items():
        if name == "type" or name in required:
            continue
        check = optional.get(name)
        if check is None or not check(value):
            raise CodecError(f"{kind}.{name}: unexpected or malformed")
    return message
