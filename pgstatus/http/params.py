"""
A request's parameters: parsing and validating the query (positions, lags,
timelines, session keys, waits, ``Accept``) into the :class:`Filters` of
a replica route.  :class:`BadParameter` carries the answer to an invalid one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote_to_bytes

from pgstatus.config.settings import Config
from pgstatus.model.selection import (
    Filters,
)

_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
_UINT = re.compile(r"[0-9]+")
MAX_TIMELINE = 4294967295
#: lag limits above this are as good as no limit; keeps ints small
MAX_LAG = 2**63 - 1
#: like the original, lag values must fit an unsigned 64-bit integer
MAX_U64 = 2**64 - 1


class BadParameter(Exception):
    """
    A query parameter has an invalid value; ``str()`` is the error text.
    """


def format_lsn(lsn: int) -> str:
    """
    ``0x3000060`` as PostgreSQL writes it: ``0/3000060``.
    """
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(value: str) -> int:
    """
    Parse ``HEX/HEX`` (1 to 8 hex digits on each side).

    :raise BadParameter: otherwise.
    """
    m = _LSN.fullmatch(value)
    if m is None:
        raise BadParameter("Invalid min_lsn")
    return (int(m.group(1), 16) << 32) | int(m.group(2), 16)


def parse_lag(value: str, name: str) -> int:
    """
    A non-negative decimal integer.

    :raise BadParameter: otherwise, naming the parameter.
    """
    digits = value.lstrip("0")
    if _UINT.fullmatch(value) is None or len(digits) > 20:
        raise BadParameter(f"Invalid {name}")
    # the significant digits only: int() refuses strings past its digit limit
    n = int(digits or "0")
    if n > MAX_U64:
        raise BadParameter(f"Invalid {name}")
    return min(n, MAX_LAG)


def parse_timeline(value: str) -> int:
    """
    A timeline, 1 to 4294967295.

    :raise BadParameter: otherwise.
    """
    if _UINT.fullmatch(value) is None or len(value) > 12:
        raise BadParameter("Invalid timeline")
    n = int(value)
    if not 1 <= n <= MAX_TIMELINE:
        raise BadParameter("Invalid timeline")
    return n


#: the longest session key accepted
MAX_KEY = 256


def parse_key(route: str, args: Mapping[str, str]) -> str | None:
    """
    ``key``: a session key (1 to 256 characters) on ``/replica`` and
    ``/sync_by_*``; ignored on ``/most_sync_by_bytes``.

    :raise BadParameter: empty or too long.
    """
    key = args.get("key")
    if key is None or route == "most_sync_by_bytes":
        return None
    if not key or len(key) > MAX_KEY:
        raise BadParameter("Invalid key")
    return key


#: the longest wait_ms accepted
MAX_WAIT_MS = 60000


def parse_wait(value: str) -> int:
    """
    ``wait_ms``: 0 to 60000.

    :raise BadParameter: otherwise.
    """
    digits = value.lstrip("0")
    if _UINT.fullmatch(value) is None or len(digits) > 5 or int(digits or "0") > MAX_WAIT_MS:
        raise BadParameter("Invalid wait_ms")
    return int(digits or "0")


def wants_json(accept: str | None) -> bool:
    """
    The ``Accept`` header lists ``application/json`` (with or without
    parameters, alone or among other media types).
    """
    if not accept:
        return False
    accept = accept.lower()
    if "json" not in accept:
        return False
    for part in accept.split(","):
        if part.split(";", 1)[0].strip() == "application/json":
            return True
    return False


#: which lag parameters a route reads, and its defaults
_ROUTES: dict[str, tuple[bool, bool, str, bool]] = {
    # route: (uses lag_ms, uses lag_bytes, mode, global defaults)
    "replica": (True, True, "and", False),
    "sync_by_time": (True, False, "and", True),
    "sync_by_bytes": (False, True, "and", True),
    "sync_by_time_or_bytes": (True, True, "or", True),
    "sync_by_time_and_bytes": (True, True, "and", True),
    "most_sync_by_bytes": (False, True, "and", True),
}
REPLICA_ROUTES = frozenset(_ROUTES)


def parse_filters(route: str, args: Mapping[str, str], config: Config) -> Filters:
    """
    The filters of a replica route from its query parameters (first value
    of each).

    :raise BadParameter: a parameter the route uses is invalid.
    """
    uses_ms, uses_bytes, mode, defaults = _ROUTES[route]
    # Both lag parameters are validated on every route, as the original
    # does; a route uses only its own.
    v = args.get("lag_ms")
    lag_ms = parse_lag(v, "lag_ms") if v is not None else (
        config.sync_max_lag_ms if defaults else None)
    v = args.get("lag_bytes")
    lag_bytes = parse_lag(v, "lag_bytes") if v is not None else (
        config.sync_max_lag_bytes if defaults else None)
    if not uses_ms:
        lag_ms = None
    if not uses_bytes:
        lag_bytes = None
    # additions of ours, only when configured: hysteresis judges the global
    # thresholds by the sync flags; the floor keeps replicas eligible
    default_ms = uses_ms and defaults and args.get("lag_ms") is None
    default_bytes = uses_bytes and defaults and args.get("lag_bytes") is None
    sync_time = default_ms and config.sync_hysteresis
    sync_bytes = default_bytes and config.sync_hysteresis
    floor = config.min_serving_replicas if (default_ms or default_bytes) else 0
    v = args.get("min_lsn")
    min_lsn = parse_lsn(v) if v is not None else None
    v = args.get("timeline")
    timeline = parse_timeline(v) if v is not None else None
    return Filters(lag_ms, lag_bytes, mode, min_lsn, timeline,  # type: ignore[arg-type]
                   sync_time, sync_bytes, floor)


def parse_query(query: bytes) -> dict[str, str]:
    """
    A request's query string as the API reads it: ``&``-separated
    ``name=value`` pairs (a pair without ``=`` is ignored), ``+`` and
    percent escapes decoded, UTF-8 decoded leniently, the first value of
    each name kept.  Both front ends read parameters through this one
    function, so they cannot split a query differently.
    """
    out: dict[str, str] = {}
    if not query:
        return out
    simple = b"%" not in query and b"+" not in query
    for part in query.split(b"&"):
        name, sep, value = part.partition(b"=")
        if not sep:
            continue
        if not simple:
            name = unquote_to_bytes(name.replace(b"+", b" "))
            value = unquote_to_bytes(value.replace(b"+", b" "))
        out.setdefault(name.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    return out
