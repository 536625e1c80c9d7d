"""
Opt-in waiting for fresh read-your-writes (``wait_ms`` /
``pg_status__min_lsn_wait_ms``), against the real topology: a fresh write is
read from a replica that has it instead of the master, the wait costs one
extra check per lagging replica, and without a replica that catches up the
answer is the master once the wait ends.  Without the parameter, behaviour
is the specification's.
"""

from __future__ import annotations

import pytest
import pytest_twisted

from service import RunningService, blocking, wait_until

pytestmark = pytest.mark.pg

# Long period: the scheduled checks cannot be what makes the replica fresh.
SLOW = {"pg_status__sleep_ms": "30000", "pg_status__query_timeout_ms": "1000"}


@pytest.fixture
def svc(guarded_topology, reactor):
    s = RunningService(reactor, {**guarded_topology.hosts_env(), **SLOW})
    yield s
    pytest_twisted.blockon(s.stop())


@pytest_twisted.inlineCallbacks
def test_fresh_write_read_from_replica(guarded_topology, svc, reactor):
    topo = guarded_topology
    yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
    replicas = {n.host: n for n in topo.replicas}
    for fast in (True, False):
        svc.svc.site.cache.enabled = fast
        lsn, tl, row = yield blocking(topo.write)
        # without waiting: the view is older than the write, so the master
        r = yield svc.get(f"/replica?min_lsn={lsn}&timeline={tl}")
        assert r.text == topo.primary.host
        extra = sum(m.extra_checks for m in svc.monitor.monitors)
        r = yield svc.get(f"/replica?min_lsn={lsn}&timeline={tl}&wait_ms=2000", json_=fast)
        host = r.json()["host"] if fast else r.text
        assert host in replicas, r
        assert (yield blocking(topo.has_row, replicas[host], row))
        assert sum(m.extra_checks for m in svc.monitor.monitors) - extra <= 2


@pytest_twisted.inlineCallbacks
def test_wait_ends_with_master_when_no_replica_catches_up(guarded_topology, svc, reactor):
    topo = guarded_topology
    yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
    for n in topo.replicas:
        yield blocking(n.pause_replay)
    lsn, tl, _ = yield blocking(topo.write)
    t0 = reactor.seconds()
    r = yield svc.get(f"/sync_by_time?min_lsn={lsn}&timeline={tl}&wait_ms=300")
    assert r.text == topo.primary.host
    assert reactor.seconds() - t0 >= 0.3
    assert svc.svc.fresh.waiting == 0


@pytest_twisted.inlineCallbacks
def test_wait_ms_validation(pg_topology, reactor):
    svc = RunningService(reactor, {**pg_topology.hosts_env(), **SLOW})
    try:
        yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
        for bad in ["-1", "x", "60001", ""]:
            r = yield svc.get(f"/replica?min_lsn=0/1&wait_ms={bad}")
            assert (r.code, r.json()) == (400, {"error_text": "Invalid wait_ms"})
    finally:
        yield svc.stop()
