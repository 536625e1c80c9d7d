"""
Scheduling, deadlines, connection turns and dead-host back-off, driven by
``twisted.internet.task.Clock``: no I/O, no real time.
"""

from __future__ import annotations

import pytest
from fakeprobe import FakeProbe, master_obs, replica_obs
from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.failures import CheckFailed
from pgstatus.monitor.service import MonitorService
from pgstatus.monitor.turns import AUTH_PAUSE, ConnectTurns, Deadline

#: the original service's poll-error lines, under one rate limit
POLL_ERRORS = ("PostgreSQL operation failed", "PostgreSQL poll timed out",
               "unexpected PostgreSQL result row count")


def make(n: int = 1, **env: str) -> tuple[Clock, MonitorService, list[FakeProbe]]:
    environ = {"pg_status__hosts": ",".join(f"h{i}" for i in range(n))}
    environ.update({f"pg_status__{k}": v for k, v in env.items()})
    config = load_config(environ)
    clock = Clock()
    probes = [FakeProbe() for _ in range(n)]
    svc = MonitorService(ConfigProvider(config), clock, probe_factory=lambda i: probes[i])
    return clock, svc, probes


def test_period_is_start_to_start() -> None:
    """
    A check that takes 200 ms is followed by the next one 800 ms later.
    """
    clock, svc, (p,) = make(sleep_ms="1000", query_timeout_ms="900")
    svc.startService()
    assert p.starts == [0]
    clock.advance(0.2)
    p.answer(master_obs(clock))
    clock.advance(0.799)
    assert p.starts == [0]
    clock.advance(0.001)
    assert p.starts == [0, 1.0]


def test_overrun_starts_next_at_once_without_pile_up() -> None:
    """
    A check longer than the period is followed immediately by one check,
    not by one per missed period.
    """
    clock, svc, (p,) = make(sleep_ms="1000", query_timeout_ms="5000")
    svc.startService()
    clock.advance(3.5)
    assert p.starts == [0]
    p.answer(master_obs(clock))
    clock.advance(0)
    assert p.starts == [0, 3.5]
    p.answer(master_obs(clock))
    clock.advance(0.999)
    assert p.starts == [0, 3.5]
    clock.advance(0.001)
    assert p.starts == [0, 3.5, 4.5]


def test_deadline_aborts_and_counts_failure() -> None:
    """
    A check without an answer is aborted at query_timeout_ms and counts as
    a failure; the host becomes possibly dead, then dead at max_fails.
    """
    clock, svc, (p,) = make(sleep_ms="1000", query_timeout_ms="300", max_fails="3")
    svc.startService()
    clock.advance(0.2)
    p.answer(master_obs(clock))
    assert svc.view.hosts[0].healthy and svc.view.master is not None
    clock.advance(0.8)  # second check at t=1.0
    clock.advance(0.29)
    assert p.aborts == 0
    clock.advance(0.02)
    assert p.aborts == 1
    h = svc.view.hosts[0]
    assert h.alive and h.possible_dead and h.lsn == 1000
    clock.advance(0.7)  # t=2.0, third check
    clock.advance(0.3)
    clock.advance(0.7)  # t=3.0, fourth check
    clock.advance(0.3)
    h = svc.view.hosts[0]
    assert not h.alive and h.possible_dead and h.lsn is None
    assert svc.registry.failures(svc.monitors[0].state) == 3


def test_deadline_pauses() -> None:
    """
    Paused time (DNS, waiting for a turn) does not count.
    """
    clock = Clock()
    fired = []
    d = Deadline(clock, 1.0, lambda: fired.append(clock.seconds()))
    d.start()
    clock.advance(0.5)
    d.pause()
    clock.advance(10)
    d.resume()
    clock.advance(0.49)
    assert fired == []
    clock.advance(0.01)
    assert fired == [pytest.approx(11.0)]


def test_deadline_stop_never_fires() -> None:
    clock = Clock()
    fired = []
    d = Deadline(clock, 1.0, lambda: fired.append(1))
    d.start()
    d.stop()
    d.resume()
    clock.advance(5)
    assert fired == [] and not d.fired


def test_turns_one_at_a_time_spaced_and_paused_after_auth() -> None:
    """
    One setup at a time; starts spaced; 100 ms after a setup that reached
    authentication.
    """
    clock = Clock()
    turns = ConnectTurns(clock, spacing=0.05)
    got: list[tuple[int, float]] = []
    holders = {}
    for i in range(3):
        d = turns.acquire()
        d.addCallback(lambda t, i=i: (got.append((i, clock.seconds())), holders.__setitem__(i, t)))
    assert got == [(0, 0)]
    assert turns.busy
    clock.advance(0.01)
    holders[0].release(reached_auth=False)
    # spacing: not before 0.05
    assert [g[0] for g in got] == [0]
    clock.advance(0.04)
    assert got[-1] == (1, pytest.approx(0.05))
    holders[1].release(reached_auth=True)
    clock.advance(AUTH_PAUSE - 0.001)
    assert len(got) == 2
    clock.advance(0.001)
    assert got[-1][0] == 2
    holders[2].release(reached_auth=False)
    assert not turns.busy


def test_turn_wait_can_be_cancelled() -> None:
    clock = Clock()
    turns = ConnectTurns(clock, spacing=0)
    first = turns.acquire()
    second = turns.acquire()
    second.cancel()
    assert turns.busy
    first.result.release(False)
    assert not turns.busy
    with pytest.raises(CancelledError):
        second.result.raiseException() if hasattr(second.result, "raiseException") else None
        raise CancelledError()
    second.addErrback(lambda f: None)


def test_spacing_formula() -> None:
    clock = Clock()
    assert ConnectTurns.for_hosts(clock, 1000, 2)._spacing == 0.25
    assert ConnectTurns.for_hosts(clock, 1000, 10)._spacing == pytest.approx(0.1)


def test_dead_host_backoff_only_for_late_failures_with_master() -> None:
    """
    While a master is selected, a dead host failing after authentication is
    checked every 2, 4, then 8 s; early failures keep sleep_ms.
    """
    clock, svc, (pm, pr) = make(2, sleep_ms="1000", query_timeout_ms="500", max_fails="1")
    svc.startService()
    pm.answer(master_obs(clock))
    pr.fail(late=True)  # dead at once (max_fails 1), late
    assert not svc.view.hosts[1].alive
    starts = []
    for _ in range(80):
        clock.advance(0.25)
        if pm.pending:
            pm.answer(master_obs(clock))
        if pr.pending:
            starts.append(clock.seconds())
            pr.fail(late=True)
    assert starts[:3] == [2.0, 6.0, 14.0]


def test_dead_host_no_backoff_without_master() -> None:
    clock, svc, (pr,) = make(1, sleep_ms="1000", query_timeout_ms="500", max_fails="1")
    svc.startService()
    pr.fail(late=True)
    starts = []
    for _ in range(20):
        clock.advance(0.25)
        if pr.pending:
            starts.append(clock.seconds())
            pr.fail(late=True)
    assert starts[:3] == [1.0, 2.0, 3.0]


def test_dead_host_early_failures_keep_sleep_ms() -> None:
    clock, svc, (pm, pr) = make(2, sleep_ms="1000", query_timeout_ms="500", max_fails="1")
    svc.startService()
    pm.answer(master_obs(clock))
    pr.fail(late=False)
    starts = []
    for _ in range(20):
        clock.advance(0.25)
        if pm.pending:
            pm.answer(master_obs(clock))
        if pr.pending:
            starts.append(clock.seconds())
            pr.fail(late=False)
    assert starts[:3] == [1.0, 2.0, 3.0]


def test_ready_after_every_first_check_and_never_unready() -> None:
    clock, svc, (a, b) = make(2, sleep_ms="1000", query_timeout_ms="500")
    svc.startService()
    a.answer(master_obs(clock))
    assert not svc.view.ready
    b.fail()
    assert svc.view.ready
    clock.advance(1)
    a.fail()
    b.fail()
    assert svc.view.ready


def test_replica_waits_for_master_check_in_progress() -> None:
    """
    A replica check that ends while the master's check runs uses that
    check's position: a caught-up replica gets the bounded lag.
    """
    clock, svc, (pm, pr) = make(2, sleep_ms="1000", query_timeout_ms="900")
    svc.startService()
    pm.answer(master_obs(clock, lsn=1000))
    pr.answer(replica_obs(clock, replay=1000))
    clock.advance(1.0)  # both check again at t=1
    obs = replica_obs(clock, replay=2000)
    pr.answer(obs)  # master check still running: the replica waits
    assert svc.monitors[1].checking
    clock.advance(0.1)
    pm.answer(master_obs(clock, lsn=2000))
    h = svc.view.hosts[1]
    assert h.lsn == 2000 and h.lag_bytes == 0
    assert h.lag_ms is not None and h.lag_ms < 1000
    # and its own schedule did not move
    clock.advance(0.9)
    assert pr.starts == [0, 1.0, 2.0]


def test_replica_wait_is_bounded_by_its_next_check() -> None:
    clock, svc, (pm, pr) = make(2, sleep_ms="1000", query_timeout_ms="5000")
    svc.startService()
    pm.answer(master_obs(clock, lsn=1000))
    pr.answer(replica_obs(clock, replay=1000))
    clock.advance(1.0)
    pr.answer(replica_obs(clock, replay=1000))
    clock.advance(1.0)  # master still silent; replica publishes and checks again
    assert pr.starts == [0, 1.0, 2.0]
    assert not svc.monitors[1].checking or pr.pending is not None


def test_stop_closes_probes_and_timers() -> None:
    clock, svc, probes = make(2)
    svc.startService()
    svc.stopService()
    assert all(p.closed for p in probes)
    clock.advance(10)
    assert all(len(p.starts) == 1 for p in probes)
    assert clock.getDelayedCalls() == [] or all(not c.active() for c in clock.getDelayedCalls())


def test_dead_hosts_wait_behind_live_ones_for_turns() -> None:
    """
    Setups of dead hosts go after every waiting setup of a live host.
    """
    clock = Clock()
    turns = ConnectTurns(clock, spacing=0)
    order = []
    first = turns.acquire()
    turns.acquire(urgent=False).addCallback(lambda t: (order.append("dead"), t.release(False)))
    turns.acquire(urgent=True).addCallback(lambda t: (order.append("live"), t.release(False)))
    first.result.release(False)
    assert order == ["live", "dead"]
    assert not turns.busy


def test_check_soon_is_coalesced_and_rate_limited() -> None:
    """
    An extra check brings the next check forward: at once, or to
    extra_check_interval_ms after the previous start; a running check or
    one already due answers the request; the schedule continues from it.
    """
    clock, svc, (p,) = make(sleep_ms="1000", query_timeout_ms="500")
    svc.startService()
    assert not svc.check_soon(0)  # a check is running
    p.answer(master_obs(clock))
    assert svc.check_soon(0)  # brought forward to 20 ms after the last start
    assert not svc.check_soon(0)  # already due
    clock.advance(0.019)
    assert p.starts == [0]
    clock.advance(0.001)
    assert p.starts == [0, pytest.approx(0.02)]
    p.answer(master_obs(clock))
    clock.advance(0.3)
    assert svc.check_soon(0)  # at once: the last start is long past
    assert p.starts[2] == pytest.approx(0.32)
    p.answer(master_obs(clock))
    clock.advance(0.999)
    assert len(p.starts) == 3
    clock.advance(0.002)
    assert p.starts[3] == pytest.approx(1.32, abs=0.002)
    assert svc.monitors[0].extra_checks == 2


def test_hostile_loop_gets_one_check_per_interval() -> None:
    """
    Requests in a tight loop (a fresh read every millisecond, or a
    follower's requests) check a host at most once per
    extra_check_interval_ms, whoever asks.
    """
    clock, svc, (p,) = make(sleep_ms="1000", query_timeout_ms="500",
                            extra_check_interval_ms="50")
    svc.startService()
    for _ in range(1000):  # one second
        svc.check_soon(0)
        if p.pending is not None and clock.seconds() - p.starts[-1] >= 0.002:
            p.answer(master_obs(clock))  # checks take 2 ms
        clock.advance(0.001)
    assert 19 <= len(p.starts) <= 21, p.starts
    gaps = [b - a for a, b in zip(p.starts, p.starts[1:], strict=False)]
    assert min(gaps) >= 0.05 - 1e-9


def test_dead_host_gets_no_extra_checks() -> None:
    """
    A dead host is checked on its schedule only, however often extra
    checks are asked for: each of its checks is a connection attempt.
    """
    clock, svc, (p,) = make(sleep_ms="1000", query_timeout_ms="500", max_fails="2")
    svc.startService()
    p.answer(master_obs(clock))
    clock.advance(1.0)
    p.fail()
    assert svc.view.hosts[0].possible_dead and svc.view.hosts[0].alive
    assert svc.check_soon(0)  # possibly dead: still checked when asked
    clock.advance(0.02)
    p.fail()
    assert not svc.view.hosts[0].alive
    starts = len(p.starts)
    for _ in range(500):
        assert not svc.check_soon(0)
        clock.advance(0.001)
    assert len(p.starts) == starts
    clock.advance(0.52)  # its schedule: 1 s after the last start
    assert len(p.starts) == starts + 1


def test_fresh_reads_release_on_view_and_expire() -> None:
    from pgstatus.http.freshness import FreshReads
    from pgstatus.model.status import View

    clock = Clock()
    asked = []
    fresh = FreshReads(clock, asked.append)
    done = []
    fresh.wait(lambda v: v.generation >= 2, 1.0, [1, 2]).addCallback(lambda _: done.append("a"))
    fresh.wait(lambda v: False, 1.0, []).addCallback(lambda _: done.append("b"))
    assert asked == [1, 2] and fresh.waiting == 2
    fresh.published(View((), None, True, 1), View((), None, True, 2))
    assert done == ["a"] and fresh.waiting == 1
    clock.advance(1.0)
    assert done == ["a", "b"] and fresh.waiting == 0


def test_fresh_reads_ask_again_with_a_doubling_gap() -> None:
    """
    A request still waiting asks again for its hosts' checks after 10 ms,
    then 20, 40, ... ms, by its own timer (no view need be published);
    a view that serves it ends the asking, and the timer with it.
    """
    from pgstatus.http.freshness import FreshReads
    from pgstatus.model.status import View

    clock = Clock()
    asked = []
    fresh = FreshReads(clock, asked.append)
    fresh.wait(lambda v: v.generation >= 100, 1.0, [1])
    assert asked == [1]
    times = []
    for _ in range(100):  # 0.5 s in 5 ms steps
        n = len(asked)
        clock.advance(0.005)
        if len(asked) > n:
            times.append(round(clock.seconds(), 3))
    assert times == pytest.approx([0.01, 0.03, 0.07, 0.15, 0.31], abs=0.0051)
    assert asked == [1] * 6
    fresh.published(View((), None, True, 99), View((), None, True, 100))
    assert fresh.waiting == 0
    clock.advance(1.0)  # the re-check timer fires once more, finds nobody, stops
    assert asked == [1] * 6 and not clock.getDelayedCalls()

def test_poll_errors_rate_limited_per_interval() -> None:
    """
    A host failing every 100 ms for 2.95 s with poll_error_log_interval_ms
    1000 logs the first failure and then one per second at error (3 in
    all), the rest at debug; after a success the next failure is an error
    again.  With 0, every failure is an error.
    """
    from twisted.logger import LogLevel, globalLogPublisher

    for interval, expected in (("1000", 3), ("0", 30)):
        events: list[dict] = []
        globalLogPublisher.addObserver(events.append)
        try:
            clock, svc, (p,) = make(sleep_ms="100", query_timeout_ms="50",
                                    poll_error_log_interval_ms=interval)
            svc.startService()
            for i in range(30):
                # the reason changes: a failed connect, then a timeout
                if i % 2 == 0:
                    p.fail()
                clock.advance(0.1)
            polls = [e for e in events if e.get("log_format", "").startswith(POLL_ERRORS)]
            errors = [e for e in polls if e["log_level"] == LogLevel.error]
            assert len(polls) == 30
            assert {e["log_format"].split(" host=")[0] for e in polls} == {
                "PostgreSQL operation failed operation={operation}", "PostgreSQL poll timed out"}
            assert len(errors) == expected, interval
            p.answer(master_obs(clock))
            clock.advance(0.1)
            p.fail()
            polls = [e for e in events if e.get("log_format", "").startswith(POLL_ERRORS)]
            assert polls[-1]["log_level"] == LogLevel.error
            assert any("recovered" in e.get("log_format", "") for e in events)
        finally:
            globalLogPublisher.removeObserver(events.append)
            svc.stopService()


def test_poll_error_lines_are_the_originals(log_events) -> None:
    """
    The three poll-error lines in the original's words and fields: an
    operation failure (with errno), a timeout, an answer with other than
    one row; each logged at error here (interval 0).
    """
    from pgstatus.logging.formats import format_json, format_text

    clock, svc, (p,) = make(sleep_ms="100", query_timeout_ms="50",
                            poll_error_log_interval_ms="0")
    svc.startService()
    try:
        p._take().errback(CheckFailed("connect", "Connection refused", errno=111))
        clock.advance(0.1)
        clock.advance(0.1)  # no answer: the deadline fires at 50 ms
        p._take().errback(CheckFailed("validate_result", "0 rows instead of one", rows=0))
    finally:
        svc.stopService()
    lines = [format_text(e).split(" ", 1)[1] for e in log_events
             if e.get("log_namespace") == "pgstatus.monitor"
             and e.get("log_format", "").startswith(POLL_ERRORS)]
    assert lines == [
        "ERROR monitor: PostgreSQL operation failed operation=connect host=h0 "
        "error=Connection refused",
        "ERROR monitor: PostgreSQL poll timed out host=h0 timeout_ms=50",
        "ERROR monitor: unexpected PostgreSQL result row count host=h0 rows=0",
    ]
    first = next(e for e in log_events if e.get("log_format", "").startswith(POLL_ERRORS))
    assert '"errno":111' in format_json(first)


def test_replica_timeline_does_not_fall_back_while_its_receiver_is_down() -> None:
    """
    The master goes down: the replica's WAL receiver stops, and its timeline
    then comes from its control file, older until the next restartpoint.
    The timeline it last reported stands, so its byte lag is still measured
    against the master's last position (before: unknown, and every failover
    logged a burst of lag_bytes=null lines); a later timeline from the
    control file, or any timeline from the receiver, is taken as it is.
    """
    from dataclasses import replace

    clock, svc, (pm, pr) = make(2, sleep_ms="1000", query_timeout_ms="900")
    svc.startService()
    pm.answer(master_obs(clock, lsn=2000, timeline=2))
    pr.answer(replica_obs(clock, replay=1500, timeline=2))
    assert svc.view.hosts[1].lag_bytes == 500
    clock.advance(1.0)
    pm.fail()
    down = replace(replica_obs(clock, replay=1500, timeline=1), receive_lsn=1500,
                   control_timeline=True)
    pr.answer(down)
    h = svc.view.hosts[1]
    assert (h.timeline, h.lag_bytes) == (2, 500)
    clock.advance(1.0)
    pm.fail()
    pr.answer(replace(down, timeline=3))
    assert svc.view.hosts[1].timeline == 3
    clock.advance(1.0)
    pm.fail()
    pr.answer(replica_obs(clock, replay=1500, timeline=1))
    assert svc.view.hosts[1].timeline == 1
