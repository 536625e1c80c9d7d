"""
``/metrics`` of a live instance against the real topology, parsed with the
Prometheus client library's text parser.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families

from service import RunningService, blocking, wait_until

pytestmark = pytest.mark.pg

FAST = {"pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "300"}


def scrape(body: bytes) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    for s in samples[name]:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((name, labels))


@pytest_twisted.inlineCallbacks
def test_metrics_of_a_live_instance(guarded_topology, reactor):
    topo = guarded_topology
    svc = RunningService(reactor, {**topo.hosts_env(), **FAST})
    try:
        yield wait_until(reactor, lambda: svc.view.ready, 10, "readiness")
        yield wait_until(reactor, lambda: all(h.healthy for h in svc.view.hosts), 5, "healthy")
        for _ in range(3):
            yield svc.get("/master")
        yield svc.get("/replica?lag_ms=x")
        yield svc.get("/replica?min_lsn=FFFFFFFF/0")  # nobody has replayed that far
        paused = topo.replicas[0]
        yield blocking(paused.pause_replay)
        yield blocking(topo.write, "y" * 5000)
        yield wait_until(reactor, lambda: (svc.host(paused.host).lag_bytes or 0) > 0, 5,
                         "lag on the paused replica")
        yield blocking(topo.replicas[1].pause_replay)
        yield blocking(topo.write, "z" * 5000)
        yield wait_until(reactor, lambda: all((svc.host(n.host).lag_bytes or 0) > 0
                                              for n in topo.replicas), 5, "lag on both")
        yield svc.get("/sync_by_bytes?lag_bytes=0")
        # replay paused behind a write: the time lag grows past 1 s for good,
        # the byte lag stays far under 1 MB
        yield wait_until(reactor, lambda: not any(svc.host(n.host).sync_by_time
                                                  for n in topo.replicas), 5,
                         "both replicas out of the time-sync set")
        r = yield svc.get("/metrics")
        assert r.code == 200
        assert r.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
        m = scrape(r.body)
        print("\n" + r.text)
    finally:
        yield svc.stop()
    primary = topo.primary.host
    assert value(m, "pgstatus_ready") == 1
    assert value(m, "pgstatus_host_master", host=primary) == 1
    assert value(m, "pgstatus_host_selected_master", host=primary) == 1
    assert value(m, "pgstatus_hosts_reporting_master") == 1
    for n in topo.replicas:
        assert value(m, "pgstatus_host_master", host=n.host) == 0
        assert value(m, "pgstatus_host_alive", host=n.host) == 1
        assert value(m, "pgstatus_host_lag_bytes", host=n.host) > 0
        assert value(m, "pgstatus_host_timeline", host=n.host) == 1
    # the sync flags, as /hosts shows them
    assert value(m, "pgstatus_host_sync_by_time", host=primary) == 1
    assert value(m, "pgstatus_host_sync_by_bytes", host=primary) == 1
    for n in topo.replicas:
        assert value(m, "pgstatus_host_sync_by_time", host=n.host) == 0
        assert value(m, "pgstatus_host_sync_by_bytes", host=n.host) == 1
    for h in topo.nodes:
        assert value(m, "pgstatus_host_checks_total", host=h.host) >= 1
        assert value(m, "pgstatus_host_connections_opened_total", host=h.host) == 1
        assert value(m, "pgstatus_host_check_duration_seconds_count", host=h.host) >= 1
        assert value(m, "pgstatus_host_consecutive_failures", host=h.host) == 0
    assert value(m, "pgstatus_http_requests_total", route="master", code="200") == 3
    assert value(m, "pgstatus_http_requests_total", route="replica", code="400") == 1
    assert value(m, "pgstatus_replica_fallbacks_total", reason="min_lsn") == 1
    assert value(m, "pgstatus_replica_fallbacks_total", reason="lag") == 1
    assert value(m, "pgstatus_replica_fallbacks_total", reason="no_replica") == 0
