"""digest(state): a replica-independent fingerprint of the whole replicated state.

Two replicas that applied the same log have equal digests; a snapshot is checked against it on
write and on restore. The encoding is canonical: every value is type-tagged and
length-prefixed, floats are encoded exactly (float.hex), and dicts are visited in sorted key
order except where insertion order is itself replicated meaning (see _ORDERED_FIELDS).
"""

from __future__ import annotations

import hashlib
from dataclasses import fields, is_dataclass
from typing import Any

from gnomon.node.core.index import RunFifo
from gnomon.node.core.model import Circuit, JobSpec, State

# Bump when the encoding changes, so old and new digests never compare equal by accident.
_DOMAIN = b"gnomon.core.state.v2\x00"

# State dicts whose iteration order is behaviour: dedupe evicts oldest first, the dead-letter
# queue is listed in the order tasks died. Every other dict is hashed in sorted key order.
_ORDERED_FIELDS = ("dedupe", "dead_letters")
# Indexes derived from other fields (rebuilt on restore, never stored): not hashed.
_DERIVED_FIELDS = ("active_runs", "running_by_job", "queued_by_job", "job_order", "tenant_job_order")
# Fields added after the encoding above was fixed, hashed only when they differ from their
# default: a state that does not use them has the digest it had before they existed (an old
# snapshot's header digest still matches its restored state).
_LATER_FIELDS: dict[str, dict[str, object]] = {
    "JobSpec": {"overlap_policy": "allow_all", "max_active_runs": None, "max_buffered_runs": 0,
                "jitter_ms": 0, "start_at_ms": 0, "end_at_ms": 0, "max_runs": 0,
                "delete_after_success": False, "circuit_breaker": None},
    "Job": {"runs_started": 0, "circuit": Circuit(), "ran_spans": (), "span_open": False,
            "backfill": None},
    "Run": {"reason": "", "cancel_requested": False, "fire_delay_ms": 0, "params": b""},
    "Schedule": {"dialect": "", "dst_nonexistent": "", "dst_ambiguous": ""},
    # Request-id scopes: a legacy entry keeps its bare request_id key and has no fingerprint.
    "DedupeEntry": {"fingerprint": b""},
}


def digest(state: State) -> str:
    """Hex sha256 of the canonical encoding of every field of `state`."""
    encoder = _Encoder()
    for f in fields(state):
        if f.name in _DERIVED_FIELDS:
            continue
        value = getattr(state, f.name)
        if f.name == "access":
            if value.token_seq or value.tenants:  # once used: older states keep their digest
                encoder.text(f.name)
                encoder.value((value.token_seq, value.tokens, value.tenants))  # not by_hash
            continue
        if f.name == "queue_circuits" and not value:  # older states keep their digest
            continue
        encoder.text(f.name)
        if f.name in _ORDERED_FIELDS:
            encoder.ordered_items(value)
        else:
            encoder.value(value)
    return hashlib.sha256(_DOMAIN + b"".join(encoder.out)).hexdigest()


class _Encoder:
    """Appends a self-delimiting, type-tagged encoding of values to `out`."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        # Many runs share one JobSpec object: hash each distinct object once.
        self._specs: dict[int, bytes] = {}

    def text(self, value: str) -> None:
        self._blob(b"s", value.encode("utf-8", "surrogatepass"))

    def value(self, value: Any) -> None:
        if value is None:
            self.out.append(b"N")
        elif isinstance(value, bool):
            self.out.append(b"T" if value else b"F")
        elif isinstance(value, int):
            self.out.append(b"i%d;" % value)
        elif isinstance(value, float):
            self.out.append(b"f" + value.hex().encode() + b";")
        elif isinstance(value, str):
            self.text(value)
        elif isinstance(value, bytes):
            self._blob(b"b", value)
        elif isinstance(value, tuple | list):
            self._sequence(value)
        elif isinstance(value, dict):
            self._sorted_items(value)
        elif isinstance(value, RunFifo):
            self._sequence(value.items())
        elif isinstance(value, JobSpec):
            self.out.append(b"J" + self._spec_digest(value))
        elif is_dataclass(value) and not isinstance(value, type):
            self._dataclass(value)
        else:
            raise TypeError(f"digest: cannot encode {type(value).__name__}")

    def ordered_items(self, mapping: dict[Any, Any]) -> None:
        self.out.append(b"o%d;" % len(mapping))
        for key, item in mapping.items():
            self.value(key)
            self.value(item)

    def _sorted_items(self, mapping: dict[Any, Any]) -> None:
        self.out.append(b"d%d;" % len(mapping))
        for key in sorted(mapping):
            self.value(key)
            self.value(mapping[key])

    def _sequence(self, items: tuple[Any, ...] | list[Any]) -> None:
        self.out.append(b"l%d;" % len(items))
        for item in items:
            self.value(item)

    def _dataclass(self, value: Any) -> None:
        name = type(value).__name__
        self.text(name)
        later = _LATER_FIELDS.get(name)
        for f in fields(value):
            item = getattr(value, f.name)
            if later is not None and f.name in later:
                if item == later[f.name]:
                    continue
                self.text(f.name)  # tagged: which later field this value belongs to
            self.value(item)

    def _spec_digest(self, spec: JobSpec) -> bytes:
        cached = self._specs.get(id(spec))
        if cached is None:
            inner = _Encoder()
            inner._dataclass(spec)
            cached = hashlib.sha256(b"".join(inner.out)).digest()
            self._specs[id(spec)] = cached
        return cached

    def _blob(self, tag: bytes, data: bytes) -> None:
        self.out.append(tag + b"%d:" % len(data) + data)
