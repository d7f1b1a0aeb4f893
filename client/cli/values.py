"""Typed values of the ``gnomon`` CLI's input (spec files and flags): strings, integers,
numbers, booleans, mappings with known keys, durations and instants. Every refusal is a
``UsageError`` naming the key or flag and the rule."""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

__all__ = [
    "UsageError",
    "check_keys",
    "fail",
    "kind_of",
    "parse_duration_ms",
    "parse_instant_ms",
    "read_bool",
    "read_float",
    "read_int",
    "read_mapping",
    "read_str",
]


class UsageError(Exception):
    """Bad flags or spec input, found before anything was sent (exit code 2)."""


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def fail(path: str, rule: str) -> UsageError:
    return UsageError(f"{path}: {rule}")


def check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = (
                f" (did you mean {close[0]!r}?)"
                if close
                else f" (expected one of {', '.join(allowed)})"
            )
            raise fail(f"{path}.{key}", f"unknown key{hint}")


def read_mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise fail(path, f"expected a mapping, got {kind_of(value)}")
    return value


def kind_of(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the string {value!r}"
    return type(value).__name__


def read_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise fail(path, f"expected a string, got {kind_of(value)}")
    return value


def read_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        raise fail(path, f"expected an integer, got {kind_of(value)}")
    return value


def read_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(path, f"expected a number, got {kind_of(value)}")
    return float(value)


def read_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise fail(path, f"expected true or false, got {kind_of(value)}")
    return value


def parse_duration_ms(value: Any, path: str = "duration") -> int:
    """Integer milliseconds, or a string like "500ms", "30s", "1m30s", "2h", "1d" (a bare
    number in a string is milliseconds)."""
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if re.fullmatch(r"\d+", text):
            return int(text)
        if text and _DURATION.sub("", text) == "":
            return round(sum(float(n) * _UNITS_MS[u] for n, u in _DURATION.findall(text)))
        raise fail(
            path, f"{value!r} is not a duration (integer milliseconds, or like 30s, 5m, 1h30m)"
        )
    ms = read_int(value, path)
    if ms < 0:
        raise fail(path, "must not be negative")
    return ms


def parse_instant_ms(value: Any, path: str = "time", *, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from an integer, an aware datetime, an ISO 8601 string with
    a zone ("2026-11-30T10:41:02Z", "2026-11-30 10:41:02+01:00"), "now", "+<duration>" or "-<duration>" (that long ago)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise fail(path, f"{value.isoformat(' ')} has no timezone: add Z or an offset")
        return round(value.timestamp() * 1000)
    if isinstance(value, str):
        text = value.strip()
        if text == "now":
            return now
        if text.startswith("+"):
            return now + parse_duration_ms(text[1:], path)
        if text.startswith("-") and len(text) > 1 and not text[1:].isdigit():
            return now - parse_duration_ms(text[1:], path)  # "-7d": a week ago
        if re.fullmatch(r"\d+", text):
            return int(text)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise fail(
                path,
                f"{value!r} is not a time (ISO 8601 with a zone like 2026-11-30T10:41:02Z, "
                "milliseconds since the epoch, now, or +30s)",
            ) from None
        return parse_instant_ms(parsed, path, now_ms=now)
    return read_int(value, path)
