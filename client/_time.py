"""Times on the wire are integer milliseconds: instants since the epoch (UTC), durations. The
SDK's models also take and give aware ``datetime`` (UTC) and ``timedelta``. A naive datetime is
refused: its timezone would be a guess."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, overload

from ._errors import InvalidArgument

T = TypeVar("T")

_MILLISECOND = timedelta(milliseconds=1)


def instant_ms(value: datetime, name: str) -> int:
    """``value`` in milliseconds since the epoch; InvalidArgument (naming ``name``) if it has
    no timezone."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name}: expected a datetime, not {type(value).__name__}")
    if value.utcoffset() is None:
        raise InvalidArgument(
            f"{name}: {value.isoformat()} is a naive datetime; give it a timezone "
            "(for example tzinfo=datetime.UTC)"
        )
    return round(value.timestamp() * 1000)


def duration_ms(value: timedelta, name: str) -> int:
    """``value`` in whole milliseconds (rounded)."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{name}: expected a timedelta, not {type(value).__name__}")
    return round(value / _MILLISECOND)


def utc(ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def utc_or_none(ms: int) -> datetime | None:
    """Like ``utc``, with None for 0 (the wire's "unset")."""
    return utc(ms) if ms else None


def millis(ms: int) -> timedelta:
    """Milliseconds as a timedelta."""
    return timedelta(milliseconds=ms)


def ms_or_alias(
    owner: str,
    ms_name: str,
    ms: int | None,
    alias: str,
    value: T | None,
    convert: Callable[[T, str], int],
) -> int | None:
    """The milliseconds of a field given as ``ms_name`` (an int; 0 is the wire's "unset") or
    as ``alias`` (a datetime or timedelta), not both; None if neither was given."""
    if value is None:
        return ms
    if ms:
        raise TypeError(f"{owner}: give {ms_name} or {alias}, not both")
    return convert(value, f"{owner}({alias}=...)")


class InstantField:
    """A read-only attribute ``x`` that reads the owner's ``x_ms`` (or ``field``) as an aware
    UTC datetime; None where the field is 0 (the wire's "unset") unless ``zero_is_epoch``."""

    def __init__(self, note: str = "", *, field: str | None = None, zero_is_epoch: bool = False):
        self._note = note
        self._field = field or ""
        self._zero_is_epoch = zero_is_epoch

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = self._field or f"{name}_ms"
        note = self._note or ("" if self._zero_is_epoch else "None if unset")
        self.__doc__ = f"``{self._field}`` as an aware UTC datetime" + (
            f" ({note})." if note else "."
        )

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> InstantField: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> datetime | None: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        ms = getattr(obj, self._field)
        return utc(ms) if ms or self._zero_is_epoch else None


class DurationField:
    """A read-only attribute ``x`` that reads the owner's ``x_ms`` as a timedelta (None only
    where the field itself is None)."""

    def __init__(self, note: str = "") -> None:
        self._note = note
        self._field = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = f"{name}_ms"
        note = f" ({self._note})" if self._note else ""
        self.__doc__ = f"``{self._field}`` as a timedelta{note}."

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> DurationField: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> timedelta: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        ms = getattr(obj, self._field)
        return None if ms is None else millis(ms)
