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
from twisted.internet.defer import DeferredList

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


@pytest_twisted.inlineCallbacks
def test_hostile_loops_are_capped(pg_topology, reactor):
    """
    Tight loops of requests that ask for extra checks (min_lsn far ahead
    with wait_ms=1, /follow/check of the master while a follower stream is
    open) check a host at most once per extra_check_interval_ms, together;
    /follow/check is refused (409) while no follower stream is open; a dead
    host gets no extra check at all.
    """
    from pgtopology import free_port
    from twisted.internet.protocol import Protocol
    from twisted.web.client import Agent

    topo = pg_topology
    env = topo.hosts_env()
    env["pg_status__hosts"] += ",127.0.0.1"
    env["pg_status__pg_port"] += f",{free_port('127.0.0.1')}"  # refused: dead at once
    svc = RunningService(reactor, {**env, **SLOW, "pg_status__extra_check_interval_ms": "100"})
    reader = None
    try:
        yield wait_until(reactor, lambda: svc.view.ready and svc.view.master is not None,
                         10, "readiness")
        assert not svc.view.hosts[3].alive
        monitors = svc.monitor.monitors

        def checks():
            return [m.checks for m in monitors]

        r = yield svc.get("/follow/check?index=0", json_=True)
        assert (r.code, r.json()) == (409, {"error_text": "no follower stream is open on this "
                                            "pg-status; /follow/check serves its followers"})
        stream = yield Agent(reactor).request(b"GET", (svc.base + "/follow").encode())
        reader = Protocol()
        stream.deliverBody(reader)
        assert svc.svc.hub.followers == 1

        @pytest_twisted.inlineCallbacks
        def loop(path, seconds=1.0):
            end = reactor.seconds() + seconds
            n = 0
            while reactor.seconds() < end:
                r = yield svc.get(path)
                assert r.code == 200, r
                n += 1
            return n

        before = checks()
        t0 = reactor.seconds()
        sent = yield DeferredList([loop("/replica?min_lsn=FFFFFFFF/0&wait_ms=1"),
                                   loop("/follow/check?index=1"),
                                   loop("/follow/check?index=3")])
        elapsed = reactor.seconds() - t0
        assert all(ok and n > 50 for ok, n in sent), sent  # far more requests than checks
        extra = [a - b for a, b in zip(checks(), before, strict=True)]
        cap = elapsed / 0.1 + 1
        assert 0 < extra[1] <= cap and 0 < extra[2] <= cap, (extra, elapsed)
        assert extra[0] == 0 and extra[3] == 0, extra  # not asked for; dead
    finally:
        if reader is not None and reader.transport is not None:
            reader.transport.stopProducing()
        yield svc.stop()
