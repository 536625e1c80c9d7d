"""
The syslog observer: log lines sent to the local syslog socket (RFC 3164
framing, written without the :mod:`syslog` module's global state).
"""

from __future__ import annotations

import os
import socket
import syslog
import threading
import time
from collections.abc import Callable
from typing import Any

from twisted.logger import (
    ILogObserver,
    LogEvent,
    LogLevel,
)
from zope.interface import implementer

from pgstatus.logging.formats import (
    format_syslog_body,
    level_of,
    parse_level,
)
from pgstatus.logging.observers import LevelFilter

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

_SYSLOG_SEVERITY: dict[LogLevel, int] = {
    LogLevel.debug: syslog.LOG_DEBUG,
    LogLevel.info: syslog.LOG_INFO,
    LogLevel.warn: syslog.LOG_WARNING,
    LogLevel.error: syslog.LOG_ERR,
    LogLevel.critical: syslog.LOG_CRIT,
}

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
        level = level_of(event)
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
    parse_level(level)
    inner = SyslogObserver(prefix, facility, address, include_traceback=(level == "debug"))
    return LevelFilter(inner, level)
