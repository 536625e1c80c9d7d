"""
The original service's log lines (``shared/spec/original-log-events.txt``),
each from a real trigger: refused connections, a frozen server, paused
replay, a promotion, a partial locality configuration, a replica request
answered with the master.  Operators' alerts match on these lines, so the
tests compare the level, component and message as written (text format,
timestamp removed) and the JSON record for some.
"""

from __future__ import annotations

import re

import pytest
import pytest_twisted
from pgtopology import free_port

from service import blocking, ready, wait_until

pytestmark = pytest.mark.pg

FAST = {
    "pg_status__sleep_ms": "200",
    "pg_status__query_timeout_ms": "300",
    "pg_status__max_fails": "3",
    "pg_status__poll_error_log_interval_ms": "0",
}


def lines(log_events) -> list[str]:
    """The text lines without their timestamps."""
    return [line.split(" ", 1)[1] for line in log_events.text()]


def matching(log_events, pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [line for line in lines(log_events) if rx.fullmatch(line)]


def has(log_events, pattern: str):
    return lambda: matching(log_events, pattern)


@pytest_twisted.inlineCallbacks
def test_start_stop_and_refused_connect(service, reactor, log_events):
    """
    Start and stop of the HTTP server and the monitor; a refused connect is
    ``PostgreSQL operation failed operation=connect`` with the errno in
    JSON, and a host never reached is dead.
    """
    port = free_port()
    svc = service({"pg_status__hosts": "127.0.0.1", "pg_status__pg_port": str(port), **FAST})
    yield wait_until(reactor, ready(svc), 5, "readiness")
    http_port = svc.svc.http.port.getHost().port
    assert matching(log_events, rf"INFO http: server started address=127\.0\.0\.1 "
                                rf"port={http_port}")
    assert matching(log_events, r"INFO monitor: started hosts=1")
    failed = matching(log_events, r"ERROR monitor: PostgreSQL operation failed operation=connect "
                                  r"host=127\.0\.0\.1 error=.*[Cc]onnection refused.*")
    assert failed
    records = [r for r in log_events.json()
               if r["message"].startswith("PostgreSQL operation failed")]
    assert records[0]["levelStr"] == "ERROR" and records[0]["component"] == "monitor"
    assert records[0]["errno"] == 111  # ECONNREFUSED
    assert matching(log_events, r"WARNING monitor: host state changed host=127\.0\.0\.1 "
                                r"state=dead")
    yield svc.stop()
    assert matching(log_events, r"INFO http: server stopped")
    assert matching(log_events, r"INFO monitor: stopped")


@pytest_twisted.inlineCallbacks
def test_frozen_replica_timeouts_and_states(guarded_topology, service, reactor, log_events):
    """
    A SIGSTOPped replica: ``PostgreSQL poll timed out host=… timeout_ms=…``
    (every failure at error with the interval 0), possibly dead, dead; back
    alive with its role once it runs again.
    """
    topo = guarded_topology
    replica = topo.replicas[0]
    svc = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    host = re.escape(replica.host)
    assert matching(log_events, rf"INFO monitor: host state changed host={host} state=alive "
                                r"role=replica")
    assert matching(log_events, rf"INFO monitor: host state changed "
                                rf"host={re.escape(topo.primary.host)} state=alive role=master")
    yield blocking(replica.sigstop)
    try:
        yield wait_until(reactor, has(log_events, rf"WARNING monitor: host state changed "
                                                  rf"host={host} state=dead"), 10, "dead")
    finally:
        yield blocking(replica.sigcont)
    timeouts = matching(log_events, rf"ERROR monitor: PostgreSQL poll timed out host={host} "
                                    r"timeout_ms=300")
    assert len(timeouts) >= 3
    assert matching(log_events, rf"WARNING monitor: host state changed host={host} "
                                r"state=possible_dead")
    n_alive = len(matching(log_events, rf"INFO monitor: host state changed host={host} "
                                       r"state=alive role=replica"))
    yield wait_until(reactor, lambda: len(matching(
        log_events, rf"INFO monitor: host state changed host={host} state=alive role=replica"))
        > n_alive, 10, "alive again")
    records = [r for r in log_events.json() if r["message"].startswith(
        f"PostgreSQL poll timed out host={replica.host}")]
    assert records[0]["levelStr"] == "ERROR" and records[0]["component"] == "monitor"


@pytest_twisted.inlineCallbacks
def test_sync_threshold_crossings(guarded_topology, service, reactor, log_events):
    """
    Paused replay and a write: the replica leaves both sync sets
    (``replica synchronization changed … synchronous=false``) and returns
    when replay resumes.
    """
    topo = guarded_topology
    replica = topo.replicas[0]
    svc = service({**topo.hosts_env(), **FAST, "pg_status__sync_max_lag_ms": "100",
                   "pg_status__sync_max_lag_bytes": "1"})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield wait_until(reactor, lambda: svc.host(replica.host).sync_by_bytes, 5, "in sync")
    host = re.escape(replica.host)
    yield blocking(replica.pause_replay)
    try:
        yield blocking(topo.write)
        yield wait_until(reactor, has(
            log_events, rf"INFO monitor: replica synchronization changed host={host} "
                        r"dimension=bytes synchronous=false lag_bytes=[1-9]\d* "
                        r"threshold_bytes=1"), 5, "bytes crossing")
        yield wait_until(reactor, has(
            log_events, rf"INFO monitor: replica synchronization changed host={host} "
                        r"dimension=time synchronous=false lag_ms=(\d{3,}|null) "
                        r"threshold_ms=100"), 5, "time crossing")
    finally:
        yield blocking(replica.resume_replay)
    yield wait_until(reactor, has(
        log_events, rf"INFO monitor: replica synchronization changed host={host} "
                    r"dimension=bytes synchronous=true lag_bytes=0 threshold_bytes=1"),
        5, "back in sync by bytes")


@pytest_twisted.inlineCallbacks
def test_promotion_is_a_role_change(fresh_topology, service, reactor, log_events):
    """
    The primary stops and the replica is promoted: the old master goes
    possibly dead, then dead; the replica's ``host role changed … role=master``.
    """
    topo = yield blocking(fresh_topology, 1)
    old, new = topo.primary, topo.replicas[0]
    svc = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield blocking(old.stop, "fast")
    yield blocking(new.promote)
    yield wait_until(reactor, has(log_events, rf"INFO monitor: host role changed "
                                              rf"host={re.escape(new.host)} role=master"),
                     10, "role change")
    yield wait_until(reactor, has(log_events, rf"WARNING monitor: host state changed "
                                              rf"host={re.escape(old.host)} state=dead"),
                     10, "old master dead")
    assert matching(log_events, rf"WARNING monitor: host state changed "
                                rf"host={re.escape(old.host)} state=possible_dead")
    # the role of an alive host changed: no second "state=alive" line for it
    assert not matching(log_events, rf"INFO monitor: host state changed "
                                    rf"host={re.escape(new.host)} state=alive role=master")


@pytest_twisted.inlineCallbacks
def test_locality_warning_and_fallback_debug(pg_topology, service, reactor, log_events):
    """
    A DC list without the current DC: ``WARNING config: dc preference
    disabled: incomplete locality configuration; …``.  A replica request no
    replica meets: ``DEBUG selection: master returned instead of replica
    context=…``.
    """
    topo = pg_topology
    svc = service({**topo.hosts_env(), **FAST, "pg_status__hosts_dc": "a,b,c"})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    warned = matching(log_events, r"WARNING config: dc preference disabled: incomplete "
                                  r"locality configuration; .*pg_status__current_dc.*")
    assert len(warned) == 1
    yield wait_until(reactor, lambda: all(h.alive for h in svc.view.hosts), 5, "all alive")
    r = yield svc.get("/replica?min_lsn=FFFFFFFF/0")
    assert r.text == topo.primary.host
    assert matching(log_events, r"DEBUG selection: master returned instead of replica "
                                r"context=route=/replica reason=min_lsn")
