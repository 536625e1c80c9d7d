"""
The values of a status row checked before they are believed, and the lags
computed from them checked before they are recorded.

A server (or anything answering in its place: a pooler, a proxy, a fake)
can send values the query's types allow but no healthy server sends: a
replay timestamp of ``-Infinity`` or ``NaN``, a timeline of 0.  Taken as
they are, they break the lag arithmetic or, worse, pass through it as a
plausible lag (a timestamp far in the future is a lag of 0).  Each check
here raises :class:`ValueError` naming the field and the value, so the check
fails as a failed query does and its log line says what was wrong.

Pure: no connection, no reactor.
"""

from __future__ import annotations

import math
from typing import Any

#: the largest WAL position (``XLogRecPtr`` is an unsigned 64-bit integer)
MAX_LSN = 2**64 - 1
#: the largest timeline (``TimeLineID`` is an unsigned 32-bit integer)
MAX_TIMELINE = 2**32 - 1
#: PostgreSQL's timestamp range in Unix epoch seconds: from 4714-11-24 BC
#: (``MIN_TIMESTAMP``) up to, not including, 294277-01-01 (``END_TIMESTAMP``)
MIN_EPOCH = -210866803200.0
END_EPOCH = 9224318016000.0


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def boolean(field: str, value: Any) -> bool:
    """
    ``value`` if it is really a boolean (not 1, not ``'t'``).

    :raise ValueError: naming ``field``.
    """
    if type(value) is not bool:
        raise ValueError(f"invalid {field}: {_show(value)} is not a boolean")
    return value


def _integer(field: str, value: Any) -> int:
    # bool is an int subclass: a boolean where a number belongs is wrong too
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"invalid {field}: {_show(value)} is not an integer")
    return value


def lsn(field: str, value: Any) -> int | None:
    """
    A WAL position as a byte offset: ``None`` (unknown) or an integer from
    0 to 2**64 - 1.

    :raise ValueError: naming ``field``.
    """
    if value is None:
        return None
    n = _integer(field, value)
    if not 0 <= n <= MAX_LSN:
        raise ValueError(f"invalid {field}: {n} is not a WAL position (0 to {MAX_LSN})")
    return n


def timeline(field: str, value: Any) -> int | None:
    """
    A timeline: ``None`` (unknown) or an integer from 1 to 2**32 - 1.

    :raise ValueError: naming ``field``.
    """
    if value is None:
        return None
    n = _integer(field, value)
    if not 1 <= n <= MAX_TIMELINE:
        raise ValueError(f"invalid {field}: {n} is not a timeline (1 to {MAX_TIMELINE})")
    return n


def epoch(field: str, value: Any, required: bool = False) -> float | None:
    """
    A time as Unix epoch seconds: ``None`` (unknown, unless ``required``) or
    a finite number within PostgreSQL's timestamp range (which also keeps
    every difference of two such times, in milliseconds, an exact integer
    computation).

    :raise ValueError: naming ``field``.
    """
    if value is None:
        if required:
            raise ValueError(f"invalid {field}: missing (NULL)")
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"invalid {field}: {_show(value)} is not a number")
    t = float(value)
    if not math.isfinite(t):
        raise ValueError(f"invalid {field}: {t!r} is not a finite time")
    if not MIN_EPOCH <= t < END_EPOCH:
        raise ValueError(f"invalid {field}: {t!r} is outside PostgreSQL's timestamp range")
    return t


def lag(field: str, value: Any) -> int | None:
    """
    A computed lag: ``None`` (unknown) or a non-negative integer (the
    specification's lags are ``max(0, ...)`` by definition, so a negative
    or non-integer one is a bug, not a measurement).

    :raise ValueError: naming ``field``.
    """
    if value is None:
        return None
    n = _integer(field, value)
    if n < 0:
        raise ValueError(f"invalid {field}: {n} is negative")
    return n
