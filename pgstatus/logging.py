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
      ``pgstatus.config.log_settings``.
    - ``twistd -n pgstatus`` (no ``--logger``): the tap calls
      :obj:`install_observer` with the application; see its docstring.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import syslog
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import FrameType
from typing import Any, TextIO

from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    LogEvent,
    LoggingFile,
    LogLevel,
    PredicateResult,
    formatEvent,
)
from twisted.python.failure import Failure
from zope.interface import implementer

__all__ = [
    "LEVELS",
    "LevelFilter",
    "MAX_FIELD_CHARS",
    "TRUNCATED",
    "SpecFormatObserver",
    "SyslogObserver",
    "ReopenableFile",
    "component_of",
    "format_json",
    "format_syslog_body",
    "format_text",
    "install_observer",
    "make_observer",
    "make_syslog_observer",
    "observer",
    "observer_for_twistd",
    "reopen_on_sighup",
]

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

_SYSLOG_SEVERITY: dict[LogLevel, int] = {
    LogLevel.debug: syslog.LOG_DEBUG,
    LogLevel.info: syslog.LOG_INFO,
    LogLevel.warn: syslog.LOG_WARNING,
    LogLevel.error: syslog.LOG_ERR,
    LogLevel.critical: syslog.LOG_CRIT,
}

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

_FIXED_COMPONENTS = {"stdout": "stdout", "stderr": "stderr"}

# Characters that would end or blur a line: C0 controls, DEL, C1 controls
# (U+0085 is NEL) and the Unicode line/paragraph separators.
_ESCAPES = {i: f"\\x{i:02x}" for i in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_ESCAPES.update(
    {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"}
)


def _level_of(event: LogEvent) -> LogLevel:
    level = event.get("log_level")
    return level if level in _SEVERITY else LogLevel.info


def _parse_level(level: str) -> LogLevel:
    try:
        return LEVELS["warning" if level == "warn" else level]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}; expected one of {sorted(LEVELS)}") from None


def _parse_format(fmt: str) -> str:
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
        "level": _level_of(event),
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


def _real_stderr() -> TextIO:
    # After twistd begins logging, sys.stderr is a LoggingFile that feeds the
    # log publisher; writing log lines there would loop.
    stream = sys.stderr
    if isinstance(stream, LoggingFile) or stream is None:
        stream = sys.__stderr__
    assert stream is not None
    return stream


@implementer(ILogObserver)
class SpecFormatObserver:
    """
    Write each event as one line in the spec's text or JSON format.

    Thread-safe: one lock serialises the write and flush of each line. Errors
    while writing are swallowed, since a logger has nowhere to report them.
    """

    def __init__(
        self,
        stream: TextIO | ReopenableFile | None = None,
        fmt: str = "text",
        include_traceback: bool = False,
        now: Callable[[], float] = time.time,
    ) -> None:
        """
        :param stream: Text stream; the process's real stderr by default
            (captured now, so twistd's stdio redirection does not loop back).
        :param fmt: ``text`` or ``json``.
        :param include_traceback: Add failure tracebacks (escaped, one line).
        :param now: Clock for events without ``log_time``.
        """
        self._stream = stream if stream is not None else _real_stderr()
        self._format = format_json if _parse_format(fmt) == "json" else format_text
        self._include_traceback = include_traceback
        self._now = now
        self._lock = threading.Lock()
        self._reopen_requested = False

    def __call__(self, event: LogEvent) -> None:
        """
        Format and write one event.
        """
        try:
            line = self._format(event, self._include_traceback, self._now) + "\n"
        except Exception:  # never let a bad event break logging
            line = f"{format_timestamp(self._now())} ERROR logging: unformattable event\n"
        with self._lock:
            try:
                if self._reopen_requested:
                    self._reopen_requested = False
                    if isinstance(self._stream, ReopenableFile):
                        self._stream.reopen()
                self._stream.write(line)
                self._stream.flush()
            except Exception:
                pass

    def request_reopen(self) -> None:
        """
        Reopen a :obj:`ReopenableFile` output before the next line (log rotation).

        Only sets a flag, so it is safe to call from a signal handler.
        """
        self._reopen_requested = True


class ReopenableFile:
    """
    A log file opened for appending, reopened on request (e.g. after
    ``logrotate`` moved it away).
    """

    def __init__(self, path: str) -> None:
        """
        :param path: The file to append to; created if missing.
        """
        self.path = os.path.abspath(path)
        self._file: TextIO = open(self.path, "a", encoding="utf-8", errors="backslashreplace")

    def write(self, text: str) -> None:
        """
        Append ``text``.
        """
        self._file.write(text)

    def flush(self) -> None:
        """
        Flush to the operating system.
        """
        self._file.flush()

    def reopen(self) -> None:
        """
        Close and reopen the path; on failure keep writing to the old file.
        """
        try:
            new = open(self.path, "a", encoding="utf-8", errors="backslashreplace")
        except OSError:
            return
        old, self._file = self._file, new
        old.close()

    def close(self) -> None:
        """
        Close the file.
        """
        self._file.close()


@implementer(ILogObserver)
class SyslogObserver:
    """
    Send each event as one syslog datagram, never blocking.

    Over a Unix datagram socket (e.g. ``/dev/log``) the datagram is
    ``<PRI>Mmm dd HH:MM:SS TAG[PID]: BODY``, the local format of ``syslog(3)``;
    over UDP, ``<PRI>Mmm dd HH:MM:SS HOSTNAME TAG[PID]: BODY`` (RFC 3164).
    BODY is :obj:`format_syslog_body`; PRI is the facility plus the severity
    mapped from the event level. A datagram the receiver cannot take right
    now (``EAGAIN``) or at all is dropped; a missing receiver is retried at
    the next event.
    """

    #: Longest datagram sent, in bytes; longer ones are cut.
    max_datagram = 8192

    def __init__(
        self,
        prefix: str = "pgstatus",
        facility: int = syslog.LOG_DAEMON,
        address: str | tuple[str, int] = "/dev/log",
        include_traceback: bool = False,
        now: Callable[[], float] = time.time,
    ) -> None:
        """
        :param prefix: Syslog tag (program name).
        :param facility: A ``syslog.LOG_*`` facility, e.g. ``syslog.LOG_DAEMON``.
        :param address: Path of a Unix datagram socket, or ``(host, port)``
            for UDP (resolved once, here).
        :param include_traceback: Add failure tracebacks (escaped, one line).
        :param now: Clock for events without ``log_time``.
        """
        self._prefix = prefix
        self._facility = facility
        self._include_traceback = include_traceback
        self._now = now
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._reopen_requested = False
        if isinstance(address, str):
            self._family = socket.AF_UNIX
            self._address: Any = address
            self._hostname: str | None = None
        else:
            host, port = address
            family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            self._family, self._address = family, sockaddr
            self._hostname = socket.gethostname().split(".")[0] or "-"

    def _connect(self) -> socket.socket | None:
        if self._sock is None:
            sock = socket.socket(self._family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            try:
                sock.connect(self._address)
            except OSError:
                sock.close()
                return None
            self._sock = sock
        return self._sock

    def datagram(self, event: LogEvent) -> bytes:
        """
        Build the datagram for one event.
        """
        level = _level_of(event)
        pri = self._facility | _SYSLOG_SEVERITY[level]
        when = event.get("log_time")
        if not isinstance(when, (int, float)):
            when = self._now()
        local = time.localtime(when)
        stamp = f"{_MONTHS[local.tm_mon - 1]} {local.tm_mday:2d} {time.strftime('%H:%M:%S', local)}"
        host = f"{self._hostname} " if self._hostname else ""
        body = format_syslog_body(event, self._include_traceback)
        data = f"<{pri}>{stamp} {host}{self._prefix}[{os.getpid()}]: {body}"
        return data.encode("utf-8", "backslashreplace")[: self.max_datagram]

    def __call__(self, event: LogEvent) -> None:
        """
        Send one event; drop it if it cannot be sent at once.
        """
        try:
            data = self.datagram(event)
        except Exception:
            return
        with self._lock:
            if self._reopen_requested:
                self._reopen_requested = False
                self._close_locked()
            sock = self._connect()
            if sock is None:
                return
            try:
                sock.send(data)
            except BlockingIOError:
                pass  # receiver busy: drop, never block the reactor
            except OSError:
                self._close_locked()  # receiver gone: reconnect next time

    def _close_locked(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def request_reopen(self) -> None:
        """
        Reconnect before the next datagram (e.g. after syslogd restarted).

        Only sets a flag, so it is safe to call from a signal handler.
        """
        self._reopen_requested = True

    def close(self) -> None:
        """
        Close the socket.
        """
        with self._lock:
            self._close_locked()


class LevelFilter(FilteringLogObserver):
    """
    A :obj:`FilteringLogObserver` that drops events below a minimum level.

    :ivar observer: The wrapped observer.
    :ivar level: The minimum level name.
    """

    def __init__(self, observer: ILogObserver, level: str) -> None:
        """
        :param observer: Receives the events that pass.
        :param level: ``debug``, ``info``, ``warning``, ``error`` or ``fatal``.
        :raise ValueError: For an unknown level.
        """
        self._minimum = _parse_level(level)
        super().__init__(observer, [self._predicate])
        self.observer = observer
        self.level = level

    def _predicate(self, event: LogEvent) -> PredicateResult:
        if _level_of(event) < self._minimum:
            return PredicateResult.no
        return PredicateResult.maybe

    def reconfigure(self, level: str, fmt: str | None = None) -> None:
        """
        Change the minimum level (and, for a stream observer, the format)
        from now on, e.g. after a configuration reload.  Tracebacks are
        included only at ``debug``, as in :obj:`make_observer`.

        :param level: ``debug``, ``info``, ``warning``, ``error`` or ``fatal``.
        :param fmt: ``text`` or ``json``; ignored by a syslog observer.
        :raise ValueError: For an unknown level or format.
        """
        minimum = _parse_level(level)
        formatter = None
        if fmt is not None:
            formatter = format_json if _parse_format(fmt) == "json" else format_text
        self._minimum = minimum
        self.level = level
        inner = self.observer
        if hasattr(inner, "_include_traceback"):
            inner._include_traceback = level == "debug"
        if formatter is not None and isinstance(inner, SpecFormatObserver):
            inner._format = formatter


def make_observer(
    level: str = "info", fmt: str = "text", stream: TextIO | ReopenableFile | None = None
) -> LevelFilter:
    """
    A stream observer in the spec's format that drops events below ``level``.

    Tracebacks of failures are included (on the same line) only at ``debug``.

    :param level: ``debug``, ``info``, ``warning``, ``error`` or ``fatal``.
    :param fmt: ``text`` or ``json``.
    :param stream: Text stream; the real stderr by default.
    :raise ValueError: For an unknown level or format.
    """
    _parse_level(level)
    inner = SpecFormatObserver(stream, fmt, include_traceback=(level == "debug"))
    return LevelFilter(inner, level)


def make_syslog_observer(
    prefix: str = "pgstatus",
    facility: int = syslog.LOG_DAEMON,
    address: str | tuple[str, int] = "/dev/log",
    level: str = "info",
) -> LevelFilter:
    """
    A :obj:`SyslogObserver` that drops events below ``level``.

    :param prefix: Syslog tag.
    :param facility: A ``syslog.LOG_*`` facility.
    :param address: Unix datagram socket path, or ``(host, port)`` for UDP.
    :param level: ``debug``, ``info``, ``warning``, ``error`` or ``fatal``.
    """
    _parse_level(level)
    inner = SyslogObserver(prefix, facility, address, include_traceback=(level == "debug"))
    return LevelFilter(inner, level)


def observer() -> ILogObserver:
    """
    Factory for ``twistd --logger=pgstatus.logging.observer``: stderr in the
    configured level and format.

    Reads the settings with ``pgstatus.config.log_settings``, which
    returns ``(level, fmt)`` and falls back to ``("info", "text")`` for invalid
    values (configuration validation reports them later).
    """
    from pgstatus.config import log_settings, process_environ

    global _factory_observer
    level, fmt = log_settings(process_environ())
    _factory_observer = make_observer(level, fmt)
    return _factory_observer


#: the observer :obj:`observer` made last (twistd's ``--logger``), for reloads
_factory_observer: LevelFilter | None = None


def factory_observer() -> LevelFilter | None:
    """
    The observer that ``twistd --logger=pgstatus.logging.observer`` made,
    if any, so a configuration reload can change its level.
    """
    return _factory_observer


def reopen_on_sighup(obs: ILogObserver) -> None:
    """
    Make SIGUSR1 and SIGHUP reopen ``obs``'s output (log file or syslog
    socket), for log rotation.

    Twisted does not handle SIGHUP, whose default action ends the process;
    the init script's ``reload`` sends it after log rotation. The handler
    only flags the observer (safe in a signal handler, even while a line is
    being written); the next event reopens before it is written.
    """
    target = obs.observer if isinstance(obs, LevelFilter) else obs
    request = getattr(target, "request_reopen", None)
    if request is None:
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        request()

    signal.signal(signal.SIGUSR1, handler)
    signal.signal(signal.SIGHUP, handler)


def _is_daemon(server_options: Mapping[str, Any]) -> bool:
    return not (server_options.get("nodaemon") or server_options.get("debug"))


def observer_for_twistd(
    server_options: Mapping[str, Any], level: str = "info", fmt: str = "text"
) -> ILogObserver:
    """
    Our observer for twistd's logging options.

    ==============================  ===========================================
    twistd options                  output
    ==============================  ===========================================
    ``--syslog [--prefix=P]``        :obj:`SyslogObserver` to ``/dev/log``, tag P
                                    (twistd's default prefix ``twisted``
                                    becomes ``pg-status``)
    ``--logfile=PATH``               append to PATH (reopened on SIGHUP)
    ``-n``, no ``--logfile`` or ``-``  stderr
    daemon, no ``--logfile``         ``twistd.log`` (as twistd does)
    daemon, ``--logfile=-``          exit: "Daemons cannot log to stdout"
    ==============================  ===========================================

    Syslog ignores ``fmt``: its body is always the text form.

    :param server_options: twistd's parsed options (``ServerOptions``).
    :param level: Minimum level name.
    :param fmt: ``text`` or ``json``.
    """
    if server_options.get("syslog"):
        prefix = server_options.get("prefix") or "twisted"
        return make_syslog_observer(
            prefix="pg-status" if prefix == "twisted" else prefix, level=level
        )
    logfile = server_options.get("logfile") or ""
    if logfile == "-" and _is_daemon(server_options):
        sys.exit("Daemons cannot log to stdout, exiting!")
    if not logfile and _is_daemon(server_options):
        logfile = "twistd.log"
    if logfile and logfile != "-":
        return make_observer(level, fmt, ReopenableFile(logfile))
    return make_observer(level, fmt)


def install_observer(
    application: Any,
    server_options: Mapping[str, Any] | None = None,
    level: str = "info",
    fmt: str = "text",
    sighup: bool = True,
) -> ILogObserver | None:
    """
    Make plain ``twistd pgstatus`` log through our observer.

    twistd's :obj:`AppLogger <twisted.application.app.AppLogger>` takes, in this
    order: the ``--logger`` factory, else the application's ``ILogObserver``
    component, else its own default observer. The plugin's service is added
    to the application before logging starts, so the tap's top-level service
    calls this from ``setServiceParent``::

        class PgStatusService(MultiService):
            def __init__(self, config, server_options):
                super().__init__()
                self._config, self._server_options = config, server_options

            def setServiceParent(self, parent):
                install_observer(parent, self._server_options,
                                 self._config.log_level, self._config.log_format)
                super().setServiceParent(parent)

    with ``server_options = options.parent`` in ``makeService(options)``.

    Nothing is done if ``--logger`` was given (it wins anyway), if the
    application already has an observer component, or if ``application``
    is not a componentized twistd application (e.g. a parent service in a
    test).

    :param application: The parent passed to ``setServiceParent``.
    :param server_options: twistd's ``ServerOptions`` (the plugin options'
        ``parent``), or :obj:`None` outside twistd.
    :param level: Minimum level name.
    :param fmt: ``text`` or ``json``.
    :param sighup: Install the SIGHUP handler of :obj:`reopen_on_sighup`.
    :return: The installed observer, or :obj:`None`.
    """
    if server_options is None or server_options.get("logger"):
        return None
    get = getattr(application, "getComponent", None)
    if get is None or not hasattr(application, "setComponent"):
        return None
    if get(ILogObserver, None) is not None:
        return None
    obs = observer_for_twistd(server_options, level, fmt)
    application.setComponent(ILogObserver, obs)
    if sighup:
        reopen_on_sighup(obs)
    return obs
