"""
A split brain on real PostgreSQL, as a hung HA manager leaves it: a replica
is promoted while the old primary keeps running and accepting writes.  With
``pg_status__split_brain=timeline`` the promoted host (a new timeline) is
named master within one check of its promotion; with the default, the first
in host order stays, as the original does.  Both say it once, as a WARNING
naming each master and its timeline, and ``/metrics`` counts two hosts
reporting master.
"""

from __future__ import annotations

import pytest_twisted
from service import RunningService, blocking, wait_until

SLEEP_MS = 300


@pytest_twisted.inlineCallbacks
def test_promoted_standby_wins_on_its_timeline(fresh_topology, reactor, log_events):
    topo = yield blocking(fresh_topology, 1)
    old, new = topo.nodes
    env = {**topo.hosts_env(), "pg_status__sleep_ms": str(SLEEP_MS)}
    services = {rule: RunningService(reactor, {**env, "pg_status__split_brain": rule})
                for rule in ("first", "timeline")}
    try:
        for svc in services.values():
            yield wait_until(reactor, lambda svc=svc: svc.view.ready
                             and svc.view.master is not None
                             and svc.view.master.name == old.host, 15, "the old primary")
        # the old primary keeps running: promote the replica beside it
        t0 = reactor.seconds()
        yield blocking(new.promote)
        promoted = reactor.seconds()
        assert (yield blocking(old.is_in_recovery)) is False
        timeline = services["timeline"]
        _, waited = yield wait_until(
            reactor, lambda: timeline.view.master is not None
            and timeline.view.master.name == new.host, 10, "the promoted host")
        # one check of the new master after pg_ctl promote returned (its
        # check period, plus a query), measured from the promotion's start
        assert reactor.seconds() - promoted < SLEEP_MS / 1000 + 1.0, (waited, promoted - t0)
        first = services["first"]
        yield wait_until(reactor, lambda: first.host(new.host).master, 10,
                         "the default rule's service to see both masters")
        for _ in range(5):
            assert (yield first.get("/master")).text == old.host
            assert (yield timeline.get("/master")).text == new.host
        for svc in services.values():
            metrics = (yield svc.get("/metrics")).text
            assert "\npgstatus_hosts_reporting_master 2\n" in metrics
    finally:
        for svc in services.values():
            yield svc.stop()
    warnings = [line for line in log_events.text() if "split brain" in line]
    assert len(warnings) == 2, warnings
    tl_old, tl_new = 1, 2
    assert any(f"masters={old.host}(timeline={tl_old}),{new.host}(timeline={tl_new}) "
               f"selected={new.host} rule=timeline" in w for w in warnings), warnings
    assert any(f"selected={old.host} rule=first" in w for w in warnings), warnings
    assert all(" WARNING " in w for w in warnings), warnings
