"""
Fifty configured hosts of which forty hang after accepting TCP: the checks
of the ten healthy ones keep their schedule.  The healthy ten are proxies
passing to the real replicas; the forty are proxies that accept and never
answer, so each of their connection setups holds a turn until it is
aborted.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.task import deferLater

from service import RunningService, wait_until

pytestmark = pytest.mark.pg

SLEEP_MS = 500


@pytest_twisted.inlineCallbacks
def test_forty_hanging_hosts_do_not_delay_ten_healthy(pg_topology, tcp_proxy, reactor):
    healthy = [tcp_proxy(pg_topology.replicas[i % 2]) for i in range(10)]
    hanging = [tcp_proxy(pg_topology.replicas[0]) for _ in range(40)]
    for p in hanging:
        p.hang()
    proxies = healthy + hanging
    env = {
        **pg_topology.hosts_env(),
        "pg_status__hosts": ",".join("127.0.0.1" for _ in proxies),
        "pg_status__pg_port": ",".join(str(p.port) for p in proxies),
        "pg_status__sleep_ms": str(SLEEP_MS),
        "pg_status__query_timeout_ms": "1000",
    }
    svc = RunningService(reactor, env)
    try:
        mons = svc.monitor.monitors
        yield wait_until(reactor, lambda: all(m.state.reached for m in mons[:10]), 20,
                         "the healthy ten connected")
        starts: dict[int, list[float]] = {i: [] for i in range(10)}
        seen = [m.checks for m in mons[:10]]
        t_end = reactor.seconds() + 8
        while reactor.seconds() < t_end:
            for i, m in enumerate(mons[:10]):
                if m.checks != seen[i]:
                    seen[i] = m.checks
                    starts[i].append(m.last_started)
            yield deferLater(reactor, 0.02, lambda: None)
        gaps = [b - a for s in starts.values() for a, b in zip(s, s[1:], strict=False)]
        worst = max(gaps)
        print(f"\n50 hosts (40 hanging): healthy checks={sum(len(s) for s in starts.values())} "
              f"mean gap={sum(gaps) / len(gaps):.3f}s worst gap={worst:.3f}s "
              f"(sleep_ms={SLEEP_MS})")
        assert all(len(s) >= 10 for s in starts.values()), {i: len(s) for i, s in starts.items()}
        # a check waiting behind the hanging setups would wait a second or more each
        assert worst < 3 * SLEEP_MS / 1000, worst
        assert all(svc.view.hosts[i].healthy for i in range(10))
        assert not any(svc.view.hosts[i].alive for i in range(10, 50))
    finally:
        yield svc.stop()
