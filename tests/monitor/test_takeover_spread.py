"""
Where in one period a follower's first round of its own checks starts when
its hub falls silent (issue 33, item 6): at the point its random number
names, so that the followers of one hub, which all fall silent in the same
instant, do not open their connections to every PostgreSQL server in one
herd.  In memory: a ``MemoryReactorClock`` (the hub is never reached) and
fake probes.
"""

from __future__ import annotations

import pytest
from fakeprobe import FakeProbe
from twisted.internet.testing import MemoryReactorClock

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.follower import FollowerService
from pgstatus.monitor.service import MonitorService

P = "pg_status__"
ENV = {P + "hosts": "a,b,c", P + "sleep_ms": "1000", P + "follow": "http://127.0.0.1:1",
       P + "follow_timeout_ms": "3000"}


@pytest.mark.parametrize("point", [0.0, 0.25, 0.999])
def test_the_first_round_starts_at_the_random_point_of_one_period(point):
    reactor = MemoryReactorClock()
    settings = ConfigProvider(load_config(ENV))
    probes = [FakeProbe() for _ in range(3)]
    monitor = MonitorService(settings, reactor, probes.__getitem__, poll=False)
    follower = FollowerService(settings, reactor, monitor, random=lambda: point)
    monitor.startService()
    follower.startService()
    try:
        reactor.advance(2.999)
        assert follower.mode == "starting" and not monitor.polling
        reactor.advance(0.001)  # follow_timeout_ms without a hub
        assert follower.mode == "polling" and monitor.polling
        if point:
            assert [p.starts for p in probes] == [[], [], []]
            reactor.advance(point - 0.001)
            assert [p.starts for p in probes] == [[], [], []]
            reactor.advance(0.001)
        assert [p.starts for p in probes] == [[reactor.seconds()]] * 3
        assert reactor.seconds() == pytest.approx(3 + point)
    finally:
        follower.stopService()
        monitor.stopService()
