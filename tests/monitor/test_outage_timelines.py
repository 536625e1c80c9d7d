"""
Byte lags through a master outage, on real PostgreSQL: after a failover
the remaining replica follows the new master on timeline 2 while its
control file still says 1 (until its next restartpoint).  When that master
then dies, the replica's WAL receiver stops and only the control file's
timeline is left; the replica's byte lag must stay measured against the
master's last position, and no ``replica synchronization changed ...
lag_bytes=null`` line may be logged (before: every replica's lag_bytes
turned null within a quarter second of the master dying).
"""

from __future__ import annotations

import pytest_twisted
from service import RunningService, blocking, wait_until
from twisted.internet.task import deferLater


@pytest_twisted.inlineCallbacks
def test_byte_lag_survives_a_master_outage(fresh_topology, reactor, log_events):
    topo = yield blocking(fresh_topology, 2)
    _, a, b = topo.nodes
    yield blocking(topo.failover, a)
    yield blocking(topo.wait_streaming)
    # a transaction b replays, so its time lag is known too
    lsn, _, _ = yield blocking(topo.write)
    yield blocking(topo.wait_replicated, lsn)
    env = {**topo.hosts_env(), "pg_status__sleep_ms": "200",
           "pg_status__hosts": ",".join(n.host for n in (a, b)),
           "pg_status__pg_port": ",".join(str(n.port) for n in (a, b))}
    svc = RunningService(reactor, env)
    try:
        yield wait_until(reactor, lambda: svc.view.ready and svc.view.master is not None
                         and svc.host(b.host).lag_bytes is not None
                         and svc.host(b.host).timeline == 2, 15, "b following a on timeline 2")
        yield blocking(a.kill)
        # the replica notices (its receiver gone), the master dies: sample
        # b's byte lag for 3 s, twelve checks of b
        samples = []
        for _ in range(60):
            yield deferLater(reactor, 0.05, lambda: None)
            h = svc.host(b.host)
            samples.append((h.alive, h.timeline, h.lag_bytes))
        assert svc.host(a.host).possible_dead or not svc.host(a.host).alive
        assert all(alive for alive, _, _ in samples)
        assert [s for s in samples if s[2] is None or s[1] != 2] == []
    finally:
        yield svc.stop()
    nulls = [line for line in log_events.text()
             if "replica synchronization changed" in line and "lag_bytes=null" in line]
    assert nulls == []
