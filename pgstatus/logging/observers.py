"""
The stderr and file observers: one formatted line per event, written to the
real stderr or to a file that can be reopened (log rotation), and the level
filter in front of every observer.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO, cast

from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogEvent,
    LoggingFile,
    LogLevel,
    PredicateResult,
)
from zope.interface import implementer

from pgstatus.logging.formats import (
    format_json,
    format_text,
    format_timestamp,
    level_of,
    parse_format,
    parse_level,
)


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
        self._format = format_json if parse_format(fmt) == "json" else format_text
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


#: Twisted's ``Factory.doStart``/``doStop`` lines, written for every
#: outgoing HTTP connection a follower makes (its hub stream, forwarded
#: checks, each retry while no hub answers): not the original's lines,
#: and noise at ``info``; they count as ``debug``
FACTORY_CHATTER = frozenset({"Starting factory {factory!r}", "Stopping factory {factory!r}"})


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
        self._minimum = parse_level(level)
        # a plain callable is what FilteringLogObserver calls; zope cannot
        # declare that a bound method provides ILogFilterPredicate
        super().__init__(observer, [cast(ILogFilterPredicate, self._predicate)])
        self.observer = observer
        self.level = level

    def _predicate(self, event: LogEvent) -> PredicateResult:
        level = level_of(event)
        if level == LogLevel.info and event.get("log_format") in FACTORY_CHATTER:
            level = LogLevel.debug
        if level < self._minimum:
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
        minimum = parse_level(level)
        formatter = None
        if fmt is not None:
            formatter = format_json if parse_format(fmt) == "json" else format_text
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
    parse_level(level)
    inner = SpecFormatObserver(stream, fmt, include_traceback=(level == "debug"))
    return LevelFilter(inner, level)

