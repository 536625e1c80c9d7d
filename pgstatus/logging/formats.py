"""
One logging path for pg-status: every event goes through ``twisted.logger``
and is written by the observers built here, one line per event.

Text format::

    2026-08-21T12:34:56.123Z INFO http: server started address=0.0.0.0 port=8000

JSON format (one compact object per line)::

    {"@timestamp":"2026-08-21T12:34:56.123Z","levelStr":"INFO","component":"http",
     "message":"server started address=0.0.0.0 port=8000"}

Components come from the event namespace:

=========================================  =============
namespace                                  component
=========================================  =============
``pgstatus.<c>`` or ``pgstatus.<c>.<more>``  ``<c>``
``pgstatus``                                ``main``
``stdout``, ``stderr`` (redirected stdio)    ``stdout``, ``stderr``
anything else (Twisted, ``log_legacy``,     ``twisted``
Python warnings)
=========================================  =============

Severities: Twisted's ``debug``, ``info``, ``warn``, ``error``, ``critical`` are
written as DEBUG, INFO, WARNING, ERROR, FATAL; JSON writes FATAL as ERROR.

Embedded line breaks and other control characters are escaped (``\\n``,
``\\r``, ``\\t``, ``\\xNN``, ``\\u2028``...), so one event is one line. Backslashes
are left as they are. Messages and other string fields longer than
:obj:`MAX_FIELD_CHARS` are cut and end with :obj:`TRUNCATED`.

Use with twistd:

    - ``twistd --logger=pgstatus.logging.observer pgstatus``: :obj:`observer`
      reads ``pg_status__log_level`` and ``pg_status__log_format`` through
      ``pgstatus.config.environ.log_settings``.
    - ``twistd -n pgstatus`` (no ``--logger``): the tap calls
      :obj:`install_observer` with the application; see its docstring.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from twisted.logger import (
    LogEvent,
    LogLevel,
    formatEvent,
)
from twisted.python.failure import Failure

#: Configuration level names (as normalised by ``pgstatus.config``).
LEVELS: dict[str, LogLevel] = {
    "debug": LogLevel.debug,
    "info": LogLevel.info,
    "warning": LogLevel.warn,
    "error": LogLevel.error,
    "fatal": LogLevel.critical,
}

#: Longest string field (message, component) written, in characters.
MAX_FIELD_CHARS = 4096

#: Marker ending a shortened value.
TRUNCATED = "...[truncated]"

_SEVERITY: dict[LogLevel, str] = {
    LogLevel.debug: "DEBUG",
    LogLevel.info: "INFO",
    LogLevel.warn: "WARNING",
    LogLevel.error: "ERROR",
    LogLevel.critical: "FATAL",
}

_FIXED_COMPONENTS = {"stdout": "stdout", "stderr": "stderr"}

# Characters that would end or blur a line: C0 controls, DEL, C1 controls
# (U+0085 is NEL) and the Unicode line/paragraph separators.
_ESCAPES = {i: f"\\x{i:02x}" for i in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_ESCAPES.update(
    {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"}
)


def level_of(event: LogEvent) -> LogLevel:
    level = event.get("log_level")
    return level if level in _SEVERITY else LogLevel.info


def parse_level(level: str) -> LogLevel:
    try:
        return LEVELS["warning" if level == "warn" else level]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}; expected one of {sorted(LEVELS)}") from None


def parse_format(fmt: str) -> str:
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}; expected 'text' or 'json'")
    return fmt


def component_of(namespace: object) -> str:
    """
    Map an event namespace to the component written in the log line.

    :param namespace: The event's ``log_namespace``.
    :return: The part after ``pgstatus.`` for our modules, ``stdout`` or
        ``stderr`` for redirected stdio, and ``twisted`` for the rest.
    """
    if not isinstance(namespace, str):
        return "twisted"
    if namespace == "pgstatus":
        return "main"
    if namespace.startswith("pgstatus."):
        return namespace.split(".", 2)[1] or "main"
    return _FIXED_COMPONENTS.get(namespace, "twisted")


def format_timestamp(when: float) -> str:
    """
    RFC 3339 UTC timestamp with milliseconds, e.g. ``2026-08-21T12:34:56.123Z``.

    :param when: POSIX time in seconds.
    """
    millis = int(when * 1000)
    seconds, ms = divmod(millis, 1000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ms:03d}Z"


def escape_line(text: str) -> str:
    """
    Escape line breaks and other control characters so ``text`` stays on one line.
    """
    return text.translate(_ESCAPES)


def truncate(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """
    Shorten ``text`` to at most ``limit`` characters, ending with :obj:`TRUNCATED`.
    """
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(TRUNCATED))] + TRUNCATED


def _failure_of(event: LogEvent) -> Failure | None:
    failure = event.get("log_failure")
    if failure is None and event.get("isError"):
        failure = event.get("failure")  # legacy twisted.python.log.err()
    return failure if isinstance(failure, Failure) else None


def _errno_of_exception(exc: object) -> int | None:
    seen: set[int] = set()
    while isinstance(exc, BaseException) and id(exc) not in seen:
        seen.add(id(exc))
        for attr in ("errno", "osError"):  # osError: twisted.internet.error.ConnectError
            value = getattr(exc, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        exc = exc.__cause__ or exc.__context__
    return None


def event_errno(event: LogEvent) -> int | None:
    """
    The numeric system error carried by an event, if any.

    :return: The event's ``errno`` key, else the ``errno`` of its failure's
        exception (or of an exception in its cause/context chain).
    """
    value = event.get("errno")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    failure = _failure_of(event)
    return None if failure is None else _errno_of_exception(failure.value)


def event_message(event: LogEvent, include_traceback: bool = False) -> str:
    """
    The message of an event, not yet escaped or truncated.

    Format strings are rendered with :obj:`formatEvent`. A failure adds
    ``exc=Type: message``; with ``include_traceback``, also ``traceback=...``.
    """
    failure = _failure_of(event)
    if failure is not None and "log_failure" not in event:
        message = str(event.get("why") or "Unhandled Error")
    else:
        message = formatEvent(event)
    if failure is not None:
        exc_type = failure.type
        name = getattr(exc_type, "__qualname__", None) or str(exc_type)
        detail = str(failure.value)
        exc = f"{name}: {detail}" if detail else name
        message = f"{message} exc={exc}" if message else f"exc={exc}"
        if include_traceback:
            message = f"{message} traceback={failure.getTraceback().rstrip()}"
    return message


def _fields(event: LogEvent, include_traceback: bool, now: Callable[[], float]) -> dict[str, Any]:
    when = event.get("log_time")
    if not isinstance(when, (int, float)):
        when = now()
    return {
        "timestamp": format_timestamp(when),
        "level": level_of(event),
        "component": truncate(component_of(event.get("log_namespace")), 64),
        "message": event_message(event, include_traceback),
        "errno": event_errno(event),
    }


def format_text(
    event: LogEvent, include_traceback: bool = False, now: Callable[[], float] = time.time
) -> str:
    """
    Render an event as one text line, without the trailing newline.

    :param now: Clock for events without ``log_time``.
    """
    f = _fields(event, include_traceback, now)
    # Cut before escaping (escaping only lengthens), so huge messages stay cheap.
    message = truncate(escape_line(f["message"][: MAX_FIELD_CHARS + 1]))
    component = escape_line(f["component"])
    return f"{f['timestamp']} {_SEVERITY[f['level']]} {component}: {message}"


def format_json(
    event: LogEvent, include_traceback: bool = False, now: Callable[[], float] = time.time
) -> str:
    """
    Render an event as one compact JSON object, without the trailing newline.

    Fatal events get ``levelStr`` ``ERROR``; ``errno`` is added for system errors.
    """
    f = _fields(event, include_traceback, now)
    level = f["level"]
    record: dict[str, Any] = {
        "@timestamp": f["timestamp"],
        "levelStr": "ERROR" if level is LogLevel.critical else _SEVERITY[level],
        "component": f["component"],
        "message": truncate(f["message"]),
    }
    if f["errno"] is not None:
        record["errno"] = f["errno"]
    # ensure_ascii escapes U+2028/U+2029 too; control characters always are.
    return json.dumps(record, separators=(",", ":"), ensure_ascii=True)


def format_syslog_body(event: LogEvent, include_traceback: bool = False) -> str:
    """
    The text format without its timestamp: ``SEVERITY component: message``.
    """
    return format_text(event, include_traceback, now=lambda: 0.0).split(" ", 1)[1]
