"""
``/metrics`` with ``pg_status__patroni_etcd``: the store's state and its
leader key, from the published view (no PostgreSQL needed).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from pgstatus.http.metrics import MetricsRenderer
from pgstatus.model.leader import Leader
from pgstatus.model.stats import FollowStats, Histogram, HostCounters
from pgstatus.model.status import HostStatus, View


def render(leader: Leader | None) -> dict[str, list]:
    hosts = (HostStatus(0, "db1", None, None, checked=True, alive=True, master=True),)
    view = View(hosts, hosts[0], True, 1, None, leader)
    stats = SimpleNamespace(host_counters=lambda: [HostCounters(0, 1, 0, 1, Histogram())],
                            follow_stats=lambda: FollowStats("hub"))
    renderer = SimpleNamespace(requests={}, fallbacks={})
    settings = SimpleNamespace(current=SimpleNamespace(sleep_ms=1000))
    body = MetricsRenderer(lambda: view, stats, renderer, lambda: None,  # type: ignore[arg-type]
                           settings)().body  # type: ignore[arg-type]
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def test_no_store_no_lines() -> None:
    assert not any(name.startswith("pgstatus_patroni") for name in render(None))


def test_store_lines() -> None:
    leader = Leader(fresh=True, up=False, member="node1", address=("db1", 5432), revision=42,
                    changed_at=time.time() - 5)
    samples = render(leader)
    assert samples["pgstatus_patroni_store_up"][0].value == 0
    assert samples["pgstatus_patroni_store_fresh"][0].value == 1
    assert samples["pgstatus_patroni_leader_revision"][0].value == 42
    assert 4.5 < samples["pgstatus_patroni_leader_age_seconds"][0].value < 60
    (held,) = samples["pgstatus_patroni_leader"]
    assert held.labels == {"member": "node1", "address": "db1:5432"} and held.value == 1
    assert "pgstatus_patroni_leader" not in render(Leader(fresh=True, up=True))
