"""
A check that raises is a failed check: an exception after the probe
answered (computing the lags, recording, publishing, or an answer that is
not an observation at all) counts toward possibly dead and dead exactly as
a failed query does, is logged with the original's poll-error line under
the host's rate limit, and makes the host checked for readiness.

Driven by ``twisted.internet.task.Clock`` and the hand-finished probe of
``tests/fakeprobe.py``: the probe's answer is a Python object here, so what
these tests exercise is the monitor's handling of an exception wherever it
comes from; the same failures caused by a server's row over the wire are in
``test_bad_values.py``.
"""

from __future__ import annotations

import dataclasses
import math

from fakeprobe import FakeProbe, replica_obs
from twisted.internet.task import Clock
from twisted.logger import LogLevel

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.logging.formats import format_text
from pgstatus.monitor.lag import Observation
from pgstatus.monitor.service import MonitorService

POLL_ERRORS = ("PostgreSQL operation failed", "PostgreSQL poll timed out",
               "unexpected PostgreSQL result row count")
SLEEP = 0.1


def make(**env: str) -> tuple[Clock, MonitorService, FakeProbe]:
    environ = {"pg_status__hosts": "h0", "pg_status__sleep_ms": "100",
               "pg_status__query_timeout_ms": "50", "pg_status__max_fails": "3"}
    environ.update({f"pg_status__{k}": v for k, v in env.items()})
    clock = Clock()
    probe = FakeProbe()
    svc = MonitorService(ConfigProvider(load_config(environ)), clock,
                         probe_factory=lambda i: probe)
    return clock, svc, probe


def raising_obs(clock: Clock) -> Observation:
    """A replica observation whose lag cannot be computed (the arithmetic raises)."""
    return dataclasses.replace(replica_obs(clock), replay_ts=-math.inf)


def state(svc: MonitorService) -> tuple[bool, bool, bool]:
    h = svc.view.hosts[0]
    return h.checked, h.alive, h.possible_dead


def polls(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("log_namespace") == "pgstatus.monitor"
            and e.get("log_format", "").startswith(POLL_ERRORS)]


def test_raising_check_counts_toward_dead(log_events) -> None:
    """
    After a good check, checks whose recording raises: possibly dead after
    the first, dead after max_fails (3), null lags once dead; each is the
    original's validate_result line naming the host and the error, at
    error at most once per interval, the rest at debug; the traceback only
    at debug.
    """
    clock, svc, p = make(poll_error_log_interval_ms="950")
    svc.startService()
    try:
        p.answer(replica_obs(clock))
        assert state(svc) == (True, True, False)
        expected = [(True, True, True), (True, True, True), (True, False, True)]
        for want in expected:
            clock.advance(SLEEP)
            p.answer(raising_obs(clock))
            assert state(svc) == want
        assert svc.view.hosts[0].lag_ms is None
        for _ in range(27):
            clock.advance(SLEEP)
            p.answer(raising_obs(clock))
        assert len(p.starts) == 31  # the schedule went on, every period
    finally:
        svc.stopService()
    lines = polls(log_events)
    assert len(lines) == 30
    errors = [e for e in lines if e["log_level"] == LogLevel.error]
    assert len(errors) == 3  # at 0.1, 1.1 and 2.1 s of 0.1 .. 3.0 s
    assert format_text(errors[0]).split(" ", 1)[1] == (
        "ERROR monitor: PostgreSQL operation failed operation=validate_result host=h0 "
        "error=OverflowError: cannot convert float infinity to integer")
    internal = [e for e in log_events if "internal error" in e.get("log_format", "")]
    assert internal and all(e["log_level"] == LogLevel.debug for e in internal)


def test_first_check_raising_makes_host_checked() -> None:
    """
    A first check that raises still completes the host's first check:
    the monitor is ready and the host is what a host whose first check
    failed is (dead: never reached).
    """
    clock, svc, p = make()
    svc.startService()
    try:
        assert not svc.view.ready
        p.answer(raising_obs(clock))
        assert svc.view.ready
        assert state(svc) == (True, False, True)
    finally:
        svc.stopService()


def test_answer_that_is_not_an_observation() -> None:
    """
    A probe whose Deferred fires with something that is not an
    observation: a failed check (the first one: the host is checked).
    """
    clock, svc, p = make()
    svc.startService()
    try:
        p._take().callback(None)
        assert svc.view.ready and state(svc) == (True, False, True)
        clock.advance(SLEEP)
        assert len(p.starts) == 2
    finally:
        svc.stopService()


def test_error_while_publishing_a_success_is_undone() -> None:
    """
    An exception while a success is being published (here, an observer of
    the registry): the success is undone and the check counted as failed,
    with the failure count going on from before it, so three such checks
    in a row make the host dead.
    """
    clock, svc, p = make()
    armed = False

    def observer(old, new) -> None:
        if armed and new.hosts[0].healthy:
            raise RuntimeError("observer failed")

    svc.registry.observe(observer)
    svc.startService()
    try:
        p.answer(replica_obs(clock))
        assert state(svc) == (True, True, False)
        armed = True
        for want in [(True, True, True), (True, True, True), (True, False, True)]:
            clock.advance(SLEEP)
            p.answer(replica_obs(clock))
            assert state(svc) == want
    finally:
        svc.stopService()
