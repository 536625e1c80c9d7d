"""
Tests for :mod:`pgstatus.logging` (line formats, filtering, syslog, twistd
wiring) and :mod:`pgstatus.monitor.errorlog` (the poll error rate limit).
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import socket
import subprocess
import sys
import syslog
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.application.service import Application, MultiService
from twisted.internet.error import ConnectionRefusedError as TwistedConnectionRefused
from twisted.logger import ILogObserver, Logger, LoggingFile, LogLevel, globalLogPublisher
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from pgstatus import logging as pglog
from pgstatus.monitor.errorlog import PollErrorLimiter

T0 = 1787315696.123456  # 2026-08-21T12:34:56.123Z


def event(fmt: str = "hello", level: LogLevel = LogLevel.info, ns: str = "pgstatus.http",
          **kw: object) -> dict[str, object]:
    """
    A minimal event as twisted.logger.Logger would emit it.
    """
    e: dict[str, object] = {"log_format": fmt, "log_level": level, "log_namespace": ns,
                            "log_time": T0}
    e.update(kw)
    return e


def failure_of(exc: BaseException) -> Failure:
    """
    A Failure with a real traceback.
    """
    try:
        raise exc
    except BaseException:
        return Failure()


def emit(obs: object, *events: dict[str, object]) -> None:
    """
    Pass events to an observer.
    """
    for e in events:
        obs(e)  # type: ignore[operator]


# --- text format ---------------------------------------------------------


def test_text_line_matches_spec_example() -> None:
    """
    The spec's example line is reproduced exactly, and its timestamp parses
    as RFC 3339 UTC with milliseconds.
    """
    line = pglog.format_text(event("server started address={address} port={port}",
                                   address="0.0.0.0", port=8000))
    assert line == "2026-08-21T12:34:56.123Z INFO http: server started address=0.0.0.0 port=8000"
    stamp = datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(stamp.timestamp() - T0) < 0.001


def test_observer_writes_parseable_text_lines() -> None:
    """
    Each event is one line; every timestamp parses and is the event's time
    in UTC, truncated to milliseconds.
    """
    out = io.StringIO()
    obs = pglog.make_observer("debug", "text", out)
    times = [0.0, 0.9999, 1e9 + 0.5, T0]
    emit(obs, *(event(log_time=t) for t in times))
    lines = out.getvalue().splitlines()
    assert len(lines) == len(times)
    for line, t in zip(lines, times, strict=True):
        stamp = datetime.strptime(line.split(" ")[0], "%Y-%m-%dT%H:%M:%S.%fZ")
        assert stamp.replace(tzinfo=UTC).timestamp() == pytest.approx(int(t * 1000) / 1000)
        assert line.split(" ")[0].endswith("Z") and len(line.split(" ")[0]) == 24


@pytest.mark.parametrize("level, name", [
    (LogLevel.debug, "DEBUG"), (LogLevel.info, "INFO"), (LogLevel.warn, "WARNING"),
    (LogLevel.error, "ERROR"), (LogLevel.critical, "FATAL"),
])
def test_text_severity_names(level: LogLevel, name: str) -> None:
    """
    Twisted levels are written with the spec's severity names.
    """
    assert pglog.format_text(event(level=level)).split(" ")[1] == name


@pytest.mark.parametrize("ns, component", [
    ("pgstatus.http", "http"),
    ("pgstatus.monitor.HostMonitor", "monitor"),
    ("pgstatus", "main"),
    ("stdout", "stdout"),
    ("stderr", "stderr"),
    ("twisted.application.runner._runner.Runner", "twisted"),
    ("twisted.web.server", "twisted"),
    ("log_legacy", "twisted"),
    ("pgstatusx.other", "twisted"),
    (None, "twisted"),
])
def test_component_mapping(ns: str | None, component: str) -> None:
    """
    Components come from the namespace as documented in the module.
    """
    assert pglog.component_of(ns) == component


def test_module_logger_namespace_gives_component() -> None:
    """
    A ``Logger(namespace="pgstatus.monitor")`` event reaches the observer
    with component ``monitor``.
    """
    out = io.StringIO()
    log = Logger(namespace="pgstatus.monitor", observer=pglog.make_observer("info", "text", out))
    log.warn("host state changed host={host} state={state}", host="pg-2", state="possible_dead")
    line = out.getvalue()
    assert line.endswith(" WARNING monitor: host state changed host=pg-2 state=possible_dead\n")


def test_text_escapes_line_breaks() -> None:
    """
    Embedded newlines and other control characters cannot break the
    one-line rule.
    """
    line = pglog.format_text(event("a\nb\r\nc\td\x00e\u2028f\x85g"))
    assert "\n" not in line and "\r" not in line
    assert len(line.splitlines()) == 1
    assert line.endswith(r"a\nb\r\nc\td\x00e\u2028f\x85g")


def test_failure_appends_type_and_message_without_traceback() -> None:
    """
    At info/error the failure adds its type and message, not a traceback.
    """
    f = failure_of(ValueError("bad\nvalue"))
    line = pglog.format_text(event("check failed host={host}", LogLevel.error, host="pg-1",
                                   log_failure=f))
    assert line.endswith(r"ERROR http: check failed host=pg-1 exc=ValueError: bad\nvalue")
    assert "Traceback" not in line


def test_debug_includes_traceback_on_one_line() -> None:
    """
    With level debug the traceback is included, escaped onto the same line.
    """
    out = io.StringIO()
    obs = pglog.make_observer("debug", "text", out)
    emit(obs, event("boom", LogLevel.error, log_failure=failure_of(KeyError("k"))))
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert "exc=KeyError: 'k' traceback=Traceback (most recent call last):\\n" in lines[0]
    assert "test_logging.py" in lines[0]


def test_legacy_err_event_uses_why() -> None:
    """
    A legacy ``twisted.python.log.err(failure, why)`` event is written as
    its ``why`` plus the exception, not the multi-line legacy text.
    """
    f = failure_of(RuntimeError("x"))
    e = {"log_format": "{log_text}", "log_text": "why\nTraceback...", "isError": 1,
         "failure": f, "why": "Unhandled error in Deferred:", "log_level": LogLevel.critical,
         "log_namespace": "log_legacy", "log_time": T0}
    assert pglog.format_text(e).endswith(
        "FATAL twisted: Unhandled error in Deferred: exc=RuntimeError: x")


def test_unformattable_event_still_logs_one_line() -> None:
    """
    A broken format string does not raise and still yields one line.
    """
    out = io.StringIO()
    emit(pglog.make_observer("info", "text", out), event("{missing"))
    assert len(out.getvalue().splitlines()) == 1


# --- JSON format ---------------------------------------------------------


def test_json_line_matches_spec_example() -> None:
    """
    The JSON record has exactly the spec's fields, compact separators.
    """
    line = pglog.format_json(event("host state changed host={h} state={s}", LogLevel.warn,
                                   "pgstatus.monitor", h="pg-2", s="possible_dead"))
    assert line == ('{"@timestamp":"2026-08-21T12:34:56.123Z","levelStr":"WARNING",'
                    '"component":"monitor","message":"host state changed host=pg-2 '
                    'state=possible_dead"}')


def test_json_lines_parse_and_fatal_is_error() -> None:
    """
    Every JSON line parses; fatal becomes levelStr ERROR; timestamps parse.
    """
    out = io.StringIO()
    obs = pglog.make_observer("debug", "json", out)
    levels = [LogLevel.debug, LogLevel.info, LogLevel.warn, LogLevel.error, LogLevel.critical]
    emit(obs, *(event("m {n}", lvl, n=i) for i, lvl in enumerate(levels)))
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["levelStr"] for r in records] == ["DEBUG", "INFO", "WARNING", "ERROR", "ERROR"]
    for i, r in enumerate(records):
        assert set(r) == {"@timestamp", "levelStr", "component", "message"}
        assert r["component"] == "http" and r["message"] == f"m {i}"
        datetime.strptime(r["@timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")


def test_json_escapes_newlines() -> None:
    """
    A multi-line message stays one JSON line and round-trips.
    """
    line = pglog.format_json(event("{m}", m="one\ntwo\u2028three"))
    assert len(line.splitlines()) == 1
    assert json.loads(line)["message"] == "one\ntwo\u2028three"


def test_truncation_keeps_valid_json() -> None:
    """
    A huge message is cut to the cap, marked, and the line is valid JSON,
    also when the cut falls among characters JSON must escape.
    """
    long = ("x\"\\\n\u00e9" * 5000)
    line = pglog.format_json(event("{m}", m=long))
    msg = json.loads(line)["message"]
    assert msg.endswith(pglog.TRUNCATED)
    assert len(msg) == pglog.MAX_FIELD_CHARS
    assert long.startswith(msg[: -len(pglog.TRUNCATED)])


def test_truncation_in_text() -> None:
    """
    The text format applies the same cap.
    """
    line = pglog.format_text(event("{m}", m="y" * 100_000))
    message = line.split(": ", 1)[1]
    assert message.endswith(pglog.TRUNCATED) and len(message) == pglog.MAX_FIELD_CHARS


def test_short_message_not_truncated() -> None:
    """
    A message at the cap is left alone.
    """
    m = "z" * pglog.MAX_FIELD_CHARS
    assert json.loads(pglog.format_json(event("{m}", m=m)))["message"] == m


@given(st.text(max_size=6000))
def test_any_message_is_one_line(message: str) -> None:
    """
    Whatever the message, both formats give one line; JSON gives back the
    message or a marked prefix of it.
    """
    e = event("{m}", m=message)
    text = pglog.format_text(e)
    assert len(text.splitlines()) == 1 and "\n" not in text
    line = pglog.format_json(e)
    assert len(line.splitlines()) == 1
    got = json.loads(line)["message"]
    if len(message) <= pglog.MAX_FIELD_CHARS:
        assert got == message
    else:
        assert got.endswith(pglog.TRUNCATED) and message.startswith(got[: -len(pglog.TRUNCATED)])


# --- errno ---------------------------------------------------------------


def test_errno_from_oserror_failure() -> None:
    """
    A failure whose exception is an OSError adds its errno.
    """
    try:
        open("/nonexistent/pg-status/x")
    except OSError:
        f = Failure()
    r = json.loads(pglog.format_json(event("open failed", LogLevel.error, log_failure=f)))
    assert r["errno"] == errno.ENOENT
    assert "exc=FileNotFoundError" in r["message"]


def test_errno_from_event_key_and_twisted_connect_error() -> None:
    """
    An explicit ``errno`` key and Twisted's ``ConnectError.osError`` count.
    """
    r = json.loads(pglog.format_json(event("x", errno=errno.ECONNREFUSED)))
    assert r["errno"] == errno.ECONNREFUSED
    f = failure_of(TwistedConnectionRefused(osError=errno.ECONNREFUSED))
    r = json.loads(pglog.format_json(event("x", log_failure=f)))
    assert r["errno"] == errno.ECONNREFUSED


def test_errno_from_cause_chain() -> None:
    """
    An error raised from an OSError carries the OSError's errno.
    """
    try:
        try:
            raise TimeoutError(errno.ETIMEDOUT, "timed out")
        except OSError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError:
        f = Failure()
    assert json.loads(pglog.format_json(event("x", log_failure=f)))["errno"] == errno.ETIMEDOUT


def test_no_errno_without_system_error() -> None:
    """
    Other failures and plain events have no errno field.
    """
    assert "errno" not in json.loads(pglog.format_json(event("x")))
    f = failure_of(ValueError("v"))
    assert "errno" not in json.loads(pglog.format_json(event("x", log_failure=f)))
    assert "errno" not in json.loads(pglog.format_json(event("x", errno=True)))


# --- level filtering -----------------------------------------------------


@pytest.mark.parametrize("level, expected", [
    ("debug", ["DEBUG", "INFO", "WARNING", "ERROR", "FATAL"]),
    ("info", ["INFO", "WARNING", "ERROR", "FATAL"]),
    ("warning", ["WARNING", "ERROR", "FATAL"]),
    ("warn", ["WARNING", "ERROR", "FATAL"]),
    ("error", ["ERROR", "FATAL"]),
    ("fatal", ["FATAL"]),
])
def test_filtering_by_level(level: str, expected: list[str]) -> None:
    """
    Events below the configured level are dropped, in either format.
    """
    for fmt in ("text", "json"):
        out = io.StringIO()
        log = Logger(namespace="pgstatus.main", observer=pglog.make_observer(level, fmt, out))
        log.debug("d")
        log.info("i")
        log.warn("w")
        log.error("e")
        log.critical("c")
        lines = out.getvalue().splitlines()
        if fmt == "text":
            assert [line.split(" ")[1] for line in lines] == expected
        else:
            assert len(lines) == len(expected)
            first = {"DEBUG": "d", "INFO": "i", "WARNING": "w", "ERROR": "e", "FATAL": "c"}
            assert [json.loads(line)["message"] for line in lines] == [
                first[s] for s in expected]


@pytest.mark.parametrize("level, written", [("info", 0), ("debug", 2)])
def test_twisted_factory_start_and_stop_count_as_debug(level: str, written: int) -> None:
    """
    Twisted's lines for each outgoing connection's factory (a follower's
    hub requests) are written only at ``debug``; other Twisted lines at
    ``info`` stay, a factory's listening line among them.
    """
    from twisted.internet.protocol import ClientFactory, Factory

    out = io.StringIO()
    obs = pglog.make_observer(level, "text", out)
    globalLogPublisher.addObserver(obs)
    try:
        factory = ClientFactory()
        factory.doStart()
        factory.doStop()
        Logger(namespace="twisted").info("{factory} starting on {port}", factory=Factory(), port=1)
    finally:
        globalLogPublisher.removeObserver(obs)
    lines = out.getvalue().splitlines()
    assert sum("factory" in line for line in lines) == written, lines
    assert sum(" starting on 1" in line for line in lines) == 1, lines


def test_unknown_level_or_format_rejected() -> None:
    """
    Invalid names raise ValueError (config validates them earlier).
    """
    with pytest.raises(ValueError):
        pglog.make_observer("verbose")
    with pytest.raises(ValueError):
        pglog.make_observer("info", "xml")


def test_observers_provide_ilogobserver() -> None:
    """
    The factories return ILogObserver providers.
    """
    verifyObject(ILogObserver, pglog.make_observer("info", "text", io.StringIO()))
    verifyObject(ILogObserver, pglog.SpecFormatObserver(io.StringIO()))
    verifyObject(ILogObserver, pglog.SyslogObserver(address="/nonexistent/sock"))


def test_default_stream_is_real_stderr_not_twisted_redirect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """
    When twistd has replaced sys.stderr with a LoggingFile, the observer
    writes to the process's real stderr instead (no feedback loop).
    """
    monkeypatch.setattr(sys, "stderr", LoggingFile(Logger(observer=lambda e: None)))
    obs = pglog.SpecFormatObserver()
    assert obs._stream is sys.__stderr__


def test_observer_swallows_stream_errors() -> None:
    """
    A failing stream does not raise into the log publisher.
    """
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError(errno.EPIPE, "broken pipe")

    pglog.SpecFormatObserver(Broken())(event())


def test_observer_factory_reads_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    ``observer()``, for ``twistd --logger``, takes level and format from
    the pg_status__ variables through pgstatus.config.
    """
    monkeypatch.setenv("pg_status__log_level", "warn")
    monkeypatch.setenv("pg_status__log_format", "json")
    obs = pglog.observer()
    assert isinstance(obs, pglog.LevelFilter) and obs.level == "warning"
    assert obs.observer._format is pglog.format_json  # type: ignore[attr-defined]


# --- poll error limiter --------------------------------------------------


def error_lines(limiter: PollErrorLimiter, times: list[float]) -> int:
    """
    How many of the failures at ``times`` would be logged at error.
    """
    return sum(limiter.on_failure(t) for t in times)


def test_limiter_first_failure_then_once_per_interval() -> None:
    """
    Failures every second for 3.5 minutes with a 60 s interval give one
    error at 0, 60, 120 and 180 s.
    """
    limiter = PollErrorLimiter(60_000)
    times = [1000.0 + i for i in range(210)]
    decisions = [limiter.on_failure(t) for t in times]
    assert [t - 1000 for t, d in zip(times, decisions, strict=True) if d] == [0, 60, 120, 180]


def test_limiter_window_counts() -> None:
    """
    N failures inside one interval give exactly one error line.
    """
    assert error_lines(PollErrorLimiter(1000), [5.0 + i * 0.01 for i in range(50)]) == 1
    assert error_lines(PollErrorLimiter(1000), [5.0, 5.999, 6.0, 6.5, 7.0]) == 3


def test_limiter_interval_zero_logs_every_failure() -> None:
    """
    Interval 0 logs every failure at error, even at the same instant.
    """
    assert error_lines(PollErrorLimiter(0), [1.0, 1.0, 1.0, 2.0]) == 4


def test_limiter_success_resets() -> None:
    """
    The first failure after a success is always logged at error.
    """
    limiter = PollErrorLimiter(60_000)
    assert limiter.on_failure(0.0)
    assert not limiter.on_failure(1.0)
    limiter.on_success()
    assert limiter.on_failure(2.0)
    assert not limiter.on_failure(3.0)
    limiter.on_success()
    limiter.on_success()
    assert limiter.on_failure(3.5)


def test_limiter_clock_step_back_does_not_silence() -> None:
    """
    If the clock steps back, the next failure is logged rather than
    suppressed until the clock catches up.
    """
    limiter = PollErrorLimiter(60_000)
    assert limiter.on_failure(10_000.0)
    assert limiter.on_failure(100.0)
    assert not limiter.on_failure(101.0)


def test_limiter_rejects_negative_interval() -> None:
    """
    A negative interval is a programming error.
    """
    with pytest.raises(ValueError):
        PollErrorLimiter(-1)


# --- syslog --------------------------------------------------------------


@pytest.fixture
def unix_receiver(tmp_path: Path):  # type: ignore[no-untyped-def]
    """
    A bound Unix datagram socket standing in for /dev/log.
    """
    path = str(tmp_path / "log.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield path, sock
    sock.close()


def test_syslog_unix_delivery(unix_receiver: tuple[str, socket.socket]) -> None:
    """
    An error event arrives as one datagram with PRI daemon.err, the tag and
    PID, and the text body.
    """
    path, sock = unix_receiver
    obs = pglog.make_syslog_observer(prefix="pgstatus", address=path)
    log = Logger(namespace="pgstatus.monitor", observer=obs)
    log.error("poll failed host={host} error={error}", host="pg-1", error="a\nb")
    log.debug("not sent")
    log.warn("lag high host={host}", host="pg-2")
    first = sock.recv(65536).decode()
    second = sock.recv(65536).decode()
    pri = syslog.LOG_DAEMON | syslog.LOG_ERR
    assert first.startswith(f"<{pri}>")
    head, body = first.split(": ", 1)
    assert head.endswith(f" pgstatus[{os.getpid()}]")
    assert body == r"ERROR monitor: poll failed host=pg-1 error=a\nb"
    # the syslog stamp has no year; give it a leap year (Python 3.13 warns
    # without one, and Feb 29 needs a leap year)
    time.strptime("2024 " + head[len(f"<{pri}>"):][:15], "%Y %b %d %H:%M:%S")
    assert second.startswith(f"<{syslog.LOG_DAEMON | syslog.LOG_WARNING}>")
    assert second.endswith("WARNING monitor: lag high host=pg-2")


@pytest.mark.parametrize("level, severity", [
    (LogLevel.debug, syslog.LOG_DEBUG), (LogLevel.info, syslog.LOG_INFO),
    (LogLevel.warn, syslog.LOG_WARNING), (LogLevel.error, syslog.LOG_ERR),
    (LogLevel.critical, syslog.LOG_CRIT),
])
def test_syslog_priority_mapping(level: LogLevel, severity: int) -> None:
    """
    PRI is facility | severity mapped from the level.
    """
    obs = pglog.SyslogObserver(facility=syslog.LOG_LOCAL3, address="/nonexistent/sock")
    data = obs.datagram(event(level=level))
    assert data.startswith(f"<{syslog.LOG_LOCAL3 | severity}>".encode())


def test_syslog_udp_delivery() -> None:
    """
    Over UDP the datagram also carries the host name (RFC 3164).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    try:
        obs = pglog.make_syslog_observer(prefix="pg-status", address=sock.getsockname())
        emit(obs, event("udp works", LogLevel.critical))
        text = sock.recv(65536).decode()
    finally:
        sock.close()
    host = socket.gethostname().split(".")[0]
    assert text.startswith(f"<{syslog.LOG_DAEMON | syslog.LOG_CRIT}>")
    assert f" {host} pg-status[{os.getpid()}]: FATAL http: udp works" in text


def test_syslog_missing_receiver_drops_then_reconnects(tmp_path: Path) -> None:
    """
    Without a receiver events are dropped silently; once one appears, the
    next event is delivered.
    """
    path = str(tmp_path / "late.sock")
    obs = pglog.SyslogObserver(address=path)
    obs(event("lost"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    try:
        obs(event("delivered"))
        assert sock.recv(65536).decode().endswith("delivered")
    finally:
        sock.close()
        obs.close()


def test_syslog_never_blocks_when_receiver_is_full(
        unix_receiver: tuple[str, socket.socket]) -> None:
    """
    A receiver that does not read fills up; further events are dropped
    (EAGAIN) instead of blocking the caller.
    """
    path, sock = unix_receiver
    obs = pglog.SyslogObserver(address=path)
    started = time.monotonic()
    for i in range(5000):
        obs(event("{i} " + "p" * 1000, i=i))
    assert time.monotonic() - started < 5
    received = 0
    sock.setblocking(False)
    while True:
        try:
            sock.recv(65536)
        except BlockingIOError:
            break
        received += 1
    assert 0 < received < 5000
    obs.close()


def test_syslog_receiver_restart_reconnects(tmp_path: Path) -> None:
    """
    After syslogd restarts (socket replaced), delivery resumes.
    """
    path = str(tmp_path / "r.sock")
    first = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    first.bind(path)
    obs = pglog.SyslogObserver(address=path)
    obs(event("one"))
    first.close()
    os.unlink(path)
    second = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    second.bind(path)
    second.settimeout(5)
    try:
        obs(event("two"))  # ECONNREFUSED/ENOENT on the old socket: dropped, reconnect
        obs(event("three"))
        assert second.recv(65536).decode().endswith("three")
    finally:
        second.close()
        obs.close()


# --- twistd wiring -------------------------------------------------------


def test_install_observer_sets_application_component() -> None:
    """
    With plain ``twistd -n``, the observer becomes the application's
    ILogObserver component, which twistd's AppLogger uses instead of its
    own format.
    """
    app = Application("pgstatus")
    obs = pglog.install_observer(app, {"nodaemon": True, "logger": None, "logfile": ""},
                                 "warning", "json")
    assert app.getComponent(ILogObserver) is obs
    assert isinstance(obs, pglog.LevelFilter) and obs.level == "warning"
    inner = obs.observer
    assert isinstance(inner, pglog.SpecFormatObserver) and inner._format is pglog.format_json


def test_install_observer_respects_explicit_logger_and_existing_component() -> None:
    """
    ``--logger`` or an existing component wins; tests' plain parents and a
    missing twistd (no server options) are left alone.
    """
    app = Application("pgstatus")
    assert pglog.install_observer(app, {"logger": pglog.observer}) is None
    assert app.getComponent(ILogObserver, None) is None
    assert pglog.install_observer(app, None) is None
    assert pglog.install_observer(MultiService(), {"nodaemon": True}) is None
    mine = pglog.make_observer("info", "text", io.StringIO())
    app.setComponent(ILogObserver, mine)
    assert pglog.install_observer(app, {"nodaemon": True}) is None
    assert app.getComponent(ILogObserver) is mine


def test_observer_for_twistd_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """
    twistd's --syslog/--prefix and --logfile choose where our format goes.
    """
    monkeypatch.chdir(tmp_path)
    obs = pglog.observer_for_twistd({"syslog": True, "prefix": "twisted"})
    assert isinstance(obs.observer, pglog.SyslogObserver)  # type: ignore[attr-defined]
    assert obs.observer._prefix == "pg-status"  # type: ignore[attr-defined]
    obs = pglog.observer_for_twistd({"syslog": True, "prefix": "mine"})
    assert obs.observer._prefix == "mine"  # type: ignore[attr-defined]
    obs = pglog.observer_for_twistd({"nodaemon": True, "logfile": "-"})
    assert obs.observer._stream is sys.stderr or obs.observer._stream is sys.__stderr__  # type: ignore[attr-defined]
    obs = pglog.observer_for_twistd({"nodaemon": True, "logfile": "x.log"}, "info", "json")
    emit(obs, event("to file"))
    assert json.loads((tmp_path / "x.log").read_text())["message"] == "to file"
    obs = pglog.observer_for_twistd({"nodaemon": False, "logfile": ""})
    assert (tmp_path / "twistd.log").exists()
    with pytest.raises(SystemExit, match="Daemons cannot log to stdout"):
        pglog.observer_for_twistd({"nodaemon": False, "logfile": "-"})


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGHUP])
def test_signal_reopens_log_file(tmp_path: Path, signum: int) -> None:
    """
    After logrotate moves the file, SIGUSR1 (or SIGHUP) makes the next line
    go to a fresh file at the configured path, and the process survives.
    (The observer sets no handler: the signals' one owner,
    :mod:`pgstatus.signals`, calls what :func:`reopener` gives.)
    """
    from pgstatus.signals import ProcessSignals

    path = tmp_path / "pg-status.log"
    app = Application("pgstatus")
    previous = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGUSR1)}
    owner = None
    try:
        obs = pglog.install_observer(app, {"nodaemon": True, "logfile": str(path)})
        assert obs is not None
        assert {s: signal.getsignal(s) for s in previous} == previous
        owner = ProcessSignals(None, reopen=pglog.reopener(obs))
        owner.install()
        emit(obs, event("before"))
        path.rename(tmp_path / "pg-status.log.1")
        os.kill(os.getpid(), signum)
        emit(obs, event("after"))
    finally:
        if owner is not None:
            owner.uninstall()
        for s, handler in previous.items():
            signal.signal(s, handler)
    assert (tmp_path / "pg-status.log.1").read_text().endswith("INFO http: before\n")
    assert path.read_text().endswith("INFO http: after\n")


PLUGIN = """
from twisted.application.service import ServiceMaker
Probe = ServiceMaker("logprobe", "logprobe_tap", "logging probe", "logprobe")
"""

TAP = """
import warnings
from twisted.application.service import MultiService, Service
from twisted.logger import Logger, LogLevel
from twisted.python import log as legacy, usage
from pgstatus.logging.twistd import install_observer

log = Logger(namespace="pgstatus.http")

class Options(usage.Options):
    pass

class Child(Service):
    def startService(self):
        from twisted.internet import reactor
        log.info("server started address={a} port={p}", a="0.0.0.0", p=8000)
        try:
            open("/nonexistent/x")
        except OSError:
            log.failure("open failed", level=LogLevel.error)
        log.debug("hidden")
        print("stray\\nprint")
        warnings.warn("careful")
        legacy.msg("legacy")
        reactor.callLater(0.1, reactor.stop)

class Top(MultiService):
    def __init__(self, server_options):
        super().__init__()
        self._server_options = server_options
    def setServiceParent(self, parent):
        install_observer(parent, self._server_options, "info", "text")
        super().setServiceParent(parent)

def makeService(options):
    top = Top(options.parent)
    Child().setServiceParent(top)
    return top
"""


def test_plain_twistd_uses_only_our_format(tmp_path: Path) -> None:
    """
    End to end: ``twistd -n`` with a plugin whose service calls
    install_observer prints nothing in Twisted's format: stdout is empty and
    every stderr line is a spec text line (including twistd's own startup
    and shutdown lines, prints and warnings).
    """
    (tmp_path / "twisted" / "plugins").mkdir(parents=True)
    (tmp_path / "twisted" / "plugins" / "logprobe_plugin.py").write_text(PLUGIN)
    (tmp_path / "logprobe_tap.py").write_text(textwrap.dedent(TAP))
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{repo}")
    twistd = Path(sys.executable).parent / "twistd"
    done = subprocess.run([str(twistd), "-n", "--pidfile=", "logprobe"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    for line in lines:
        stamp, severity, component, _ = line.split(" ", 3)
        datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
        assert severity in {"INFO", "WARNING", "ERROR", "FATAL"}
        assert component.endswith(":")
    text = "\n".join(lines)
    assert " INFO twisted: twistd " in text
    assert " INFO http: server started address=0.0.0.0 port=8000" in text
    assert " ERROR http: open failed exc=FileNotFoundError: " in text
    assert " INFO stdout: stray" in text
    assert " WARNING twisted: " in text and "careful" in text
    assert " INFO twisted: legacy" in text
    assert "hidden" not in text
    assert " INFO twisted: Server Shut Down." in text
