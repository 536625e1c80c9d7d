"""
Followers taking over from a killed hub: several followers (services in
this process) follow a hub (``twistd pgstatus`` in a process of its own)
that is killed with SIGKILL while every follower's ``/master`` is polled.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from daemon import Daemon
from twisted.internet.defer import DeferredList
from twisted.internet.task import deferLater

from service import blocking, ready, wait_until

pytestmark = pytest.mark.pg

HUB = {"pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "300"}
TIMEOUT_MS = 2000
#: followers; their own checks all start when the hub has been silent for
#: follow_timeout_ms
FOLLOWERS = 12


def own_round_done(fol) -> bool:
    """Every host has a completed check of the follower's own."""
    return all(m.durations.count >= 1 for m in fol.svc.monitor.monitors)


@pytest_twisted.inlineCallbacks
def test_followers_answer_the_last_snapshot_until_their_own_round(pg_topology, service,
                                                                  reactor):
    """
    The hub is killed: from before the kill until its own first round of
    checks is complete (every host checked once), a follower publishes
    nothing (its checks are recorded, not shown: a view half the hub's and
    half its own could lose the master to a few failed checks of its own
    while another host's first check still runs) and answers /master with
    the hub's last master, never 404 or 503; then its own view is
    published at once.
    """
    topo = pg_topology
    hub = Daemon({**topo.hosts_env(), **HUB})
    yield blocking(hub.start)
    try:
        yield blocking(hub.wait_ready)
        env = {**topo.hosts_env(), **HUB, "pg_status__follow": hub.url,
               "pg_status__follow_timeout_ms": str(TIMEOUT_MS)}
        fols = [service(env) for _ in range(FOLLOWERS)]
        for fol in fols:
            yield wait_until(reactor, ready(fol), 10, "follower readiness")
        master = topo.primary.host
        killed: list[float] = []
        wrong: list[tuple[int, float, int, str]] = []
        early: list[tuple[int, float, str | None]] = []  # published during the round
        counts = [0] * FOLLOWERS
        done = [False] * FOLLOWERS

        def since() -> float:
            return round(reactor.seconds() - killed[0], 3) if killed else 0.0

        for i, fol in enumerate(fols):
            def published(old, new, i=i, fol=fol):
                # (a snapshot the hub sent just before its death may still be
                # mirrored: only what the follower publishes once it polls counts)
                if fol.svc.follower.mode == "polling" and not own_round_done(fol):
                    early.append((i, since(), None if new.master is None else new.master.name))
            fol.monitor.registry.observe(published)

        @pytest_twisted.inlineCallbacks
        def poll(i, fol):
            while not (killed and own_round_done(fol)):
                r = yield fol.get("/master")
                if killed and own_round_done(fol):
                    break  # answered after the round: the follower's own view
                counts[i] += 1
                if (r.code, r.text) != (200, master):
                    wrong.append((i, since(), r.code, r.text))
                yield deferLater(reactor, 0.01, lambda: None)
            done[i] = True

        pollers = DeferredList([poll(i, f) for i, f in enumerate(fols)],
                               fireOnOneErrback=True, consumeErrors=True)
        yield deferLater(reactor, 0.3, lambda: None)
        yield blocking(hub.kill)
        killed.append(reactor.seconds())
        yield wait_until(reactor, lambda: all(done), TIMEOUT_MS / 1000 + 20,
                         "every follower's own round")
        yield pollers
        assert not wrong, (len(wrong), wrong[:10])
        assert not early, (len(early), early[:10])
        assert all(f.svc.follower.mode == "polling" for f in fols)
        assert min(counts) > 20, counts
        # then each publishes its own view, with the master it checked itself
        for fol in fols:
            yield wait_until(reactor, lambda fol=fol: not fol.monitor.registry.holding, 5,
                             "the follower's own view")
            assert fol.view.master is not None and fol.view.master.name == master
            assert fol.monitor.monitors[0].durations.count >= 1
    finally:
        yield blocking(hub.stop)
