"""
``/metrics`` against the metric table (:mod:`pgstatus.http.families`), in
memory: a hub's and a follower's answers carry exactly the table's families
for them, in its order, with its types, help lines and labels; the
stalled-check gauge and the check interval carry their values.  The same
comparison on real instances is in ``tests/docs/test_metrics_reference.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from exposition import families
from test_front import CONFIG, view

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.http.families import ALL, FOLLOWER, HUB, METRICS, PATRONI
from pgstatus.http.metrics import MetricsRenderer
from pgstatus.http.responses import Renderer
from pgstatus.model.leader import Leader
from pgstatus.model.stats import FollowStats, Histogram, HostCounters
from pgstatus.model.status import View


class Stats:
    """Fixed counters: the four hosts of ``view``, and a follower's state."""

    def __init__(self, follow: FollowStats, last: Sequence[float | None]) -> None:
        self._follow = follow
        self._last = last

    def host_counters(self) -> list[HostCounters]:
        hist = Histogram()
        hist.observe(0.003)
        return [HostCounters(0, 5, 1, 1, hist, t) for t in self._last]

    def follow_stats(self) -> FollowStats:
        return self._follow


def render(follow: FollowStats, last: Sequence[float | None] = (None,) * 4,
           sleep_ms: int = 1000, leader: Leader | None = None) -> str:
    """
    The ``/metrics`` body for ``view`` (with Patroni's ``leader``, if any)
    and ``follow``, one request counted.
    """
    config = load_config({"pg_status__hosts": "pg-1,pg-2,pg-3,pg-4",
                          "pg_status__sleep_ms": str(sleep_ms)})
    v = view()
    current = lambda: View(v.hosts, v.master, v.ready, v.generation, None, leader)  # noqa: E731
    renderer = Renderer(current, ConfigProvider(CONFIG), "1")
    renderer.requests[("master", 200)] = 3
    metrics = MetricsRenderer(current, Stats(follow, last), renderer, lambda: None,
                              ConfigProvider(config))
    response = metrics()
    assert response.status == 200
    return response.body.decode()


HUB_MODE = FollowStats("hub")
FOLLOWING = FollowStats("following", "http://hub:8000", 0.25, 1, 7)


#: a leader key held (its holder seen changing at Unix time 0)
LEADER = Leader(fresh=True, up=True, member="node1", address=("pg-1", 5432), revision=7,
                changed_at=0.0)


@pytest.mark.parametrize("follow, scopes, leader", [
    (HUB_MODE, {HUB}, None),
    (FOLLOWING, {FOLLOWER}, None),
    (HUB_MODE, {HUB, PATRONI}, LEADER),
])
def test_families_are_the_tables(follow: FollowStats, scopes: set[str],
                                 leader: Leader | None) -> None:
    """
    The answer announces the table's families for its kind of instance, in
    the table's order, each with the table's type and help line.
    """
    got = [(f.name, f.kind, f.help) for f in families(render(follow, leader=leader))]
    assert got == [(m.name, m.kind, m.help) for m in METRICS if m.scope in {ALL} | scopes]


@pytest.mark.parametrize("follow", [HUB_MODE, FOLLOWING])
def test_sample_labels_are_the_tables(follow: FollowStats) -> None:
    """
    Every sample carries the labels the table gives its family (a
    histogram's buckets ``le`` too).
    """
    table = {m.name: m for m in METRICS}
    text = render(follow, last=(12.5, None, 13.0, 14.0), leader=LEADER)
    for fam in families(text):
        for s in fam.samples:
            extra = {"le"} if s.name.endswith("_bucket") else set()
            assert set(s.labels) == set(table[fam.name].labels) | extra, s


def test_last_check_completed_and_interval() -> None:
    """
    The end of each host's last check (Unix seconds, to the millisecond),
    absent for a host that has none; ``sleep_ms`` in seconds.
    """
    fams = {f.name: f for f in families(render(HUB_MODE, (1733000000.1234, None, 5.0, 6.5),
                                               sleep_ms=200))}
    samples = fams["pgstatus_host_last_check_completed_seconds"].samples
    assert [(s.labels, s.value) for s in samples] == [
        ({"host": "pg-1", "index": "0"}, 1733000000.123),
        ({"host": "pg-3", "index": "2"}, 5.0),
        ({"host": "pg-4", "index": "3"}, 6.5),
    ]
    (interval,) = fams["pgstatus_check_interval_seconds"].samples
    assert interval.value == 0.2


def test_table_is_well_formed() -> None:
    """
    Names are unique and Prometheus-style, counters end in ``_total``, and
    every scope and type is one the docs know.
    """
    names = [m.name for m in METRICS]
    assert len(set(names)) == len(names)
    for m in METRICS:
        assert m.name.startswith("pgstatus_"), m
        assert m.kind in ("gauge", "counter", "histogram"), m
        assert m.name.endswith("_total") == (m.kind == "counter"), m
        assert m.scope in (ALL, HUB, FOLLOWER, PATRONI), m
        assert m.help.endswith(".") and "\n" not in m.help, m
