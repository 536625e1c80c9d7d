"""
``GET /metrics``: the service's state and counters in the Prometheus text
exposition format (version 0.0.4), written by hand: a scrape reads the
published view and a few counters and joins strings, nothing more.  The
families, their types and help lines are those of the metric table
(:mod:`pgstatus.http.families`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pgstatus.http.answer import Response
from pgstatus.http.families import HEADERS
from pgstatus.http.responses import Renderer
from pgstatus.model.stats import BUCKETS, FollowStats, StatsSource
from pgstatus.model.status import View

if TYPE_CHECKING:
    from pgstatus.config.provider import ConfigProvider
    from pgstatus.http.hub import Hub

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float | int | bool) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    return str(v)


class MetricsRenderer:
    """
    Builds the ``/metrics`` answer: the families of the metric table
    (:data:`~pgstatus.http.families.METRICS`), in its order, with its
    ``# HELP`` and ``# TYPE`` lines.

    :param current: returns the published view.
    :param stats: the monitor side's counters.
    :param renderer: the HTTP side's request and fallback counters.
    :param hub: returns the followers' streams, if any were made.
    :param settings: the running configuration (``sleep_ms``).
    """

    def __init__(self, current: Callable[[], View], stats: StatsSource, renderer: Renderer,
                 hub: Callable[[], Hub | None], settings: ConfigProvider) -> None:
        self._current = current
        self._stats = stats
        self._renderer = renderer
        self._hub = hub
        self._settings = settings

    def __call__(self) -> Response:
        """
        Render the current state.
        """
        return Response(200, CONTENT_TYPE, "".join(self._lines()).encode())

    def _lines(self) -> Iterable[str]:
        view = self._current()
        counters = self._stats.host_counters()
        renderer = self._renderer
        labels = [f'host="{_escape(h.name)}",index="{h.index}"' for h in view.hosts]

        yield HEADERS["pgstatus_ready"]
        yield f"pgstatus_ready {_num(view.ready)}\n"

        def per_host(name: str,
                     value: Callable[[int], float | int | bool | None]) -> Iterable[str]:
            yield HEADERS[name]
            for i, lab in enumerate(labels):
                v = value(i)
                if v is not None:
                    yield f"{name}{{{lab}}} {_num(v)}\n"

        hosts = view.hosts
        yield HEADERS["pgstatus_hosts_reporting_master"]
        yield f"pgstatus_hosts_reporting_master {sum(1 for h in hosts if h.alive and h.master)}\n"
        yield from per_host("pgstatus_host_alive", lambda i: hosts[i].alive)
        yield from per_host("pgstatus_host_possible_dead", lambda i: hosts[i].possible_dead)
        yield from per_host("pgstatus_host_master", lambda i: hosts[i].master)
        yield from per_host("pgstatus_host_selected_master",
                            lambda i: view.master is not None and view.master.index == i)
        yield from per_host("pgstatus_host_lag_ms", lambda i: hosts[i].lag_ms)
        yield from per_host("pgstatus_host_lag_bytes", lambda i: hosts[i].lag_bytes)
        yield from per_host("pgstatus_host_sync_by_time", lambda i: hosts[i].sync_by_time)
        yield from per_host("pgstatus_host_sync_by_bytes", lambda i: hosts[i].sync_by_bytes)
        yield from per_host("pgstatus_host_timeline", lambda i: hosts[i].timeline)
        yield from per_host("pgstatus_host_consecutive_failures",
                            lambda i: counters[i].failures)
        yield from per_host("pgstatus_host_checks_total", lambda i: counters[i].checks)
        yield from per_host("pgstatus_host_extra_checks_total",
                            lambda i: counters[i].extra_checks)
        yield from per_host("pgstatus_host_connections_opened_total",
                            lambda i: counters[i].connections_opened)
        name = "pgstatus_host_check_duration_seconds"
        yield HEADERS[name]
        for c, lab in zip(counters, labels, strict=True):
            hist = c.durations
            for bound, count in zip(BUCKETS, hist.counts, strict=True):
                yield f'{name}_bucket{{{lab},le="{bound}"}} {count}\n'
            yield f'{name}_bucket{{{lab},le="+Inf"}} {hist.count}\n'
            yield f"{name}_sum{{{lab}}} {hist.total!r}\n"
            yield f"{name}_count{{{lab}}} {hist.count}\n"
        yield from per_host("pgstatus_host_last_check_completed_seconds",
                            lambda i: _timestamp(counters[i].last_completed))
        yield HEADERS["pgstatus_check_interval_seconds"]
        yield f"pgstatus_check_interval_seconds {self._settings.current.sleep_ms / 1000!r}\n"
        name = "pgstatus_http_requests_total"
        yield HEADERS[name]
        for (route, status), n in sorted(renderer.requests.items()):
            yield f'{name}{{route="{_escape(route)}",code="{status}"}} {n}\n'
        name = "pgstatus_replica_fallbacks_total"
        yield HEADERS[name]
        for reason in ("no_replica", "lag", "min_lsn", "timeline"):
            yield f'{name}{{reason="{reason}"}} {renderer.fallbacks.get(reason, 0)}\n'
        yield from _follow_lines(self._stats.follow_stats(), self._hub())
        if view.leader is not None:
            yield from _patroni_lines(view)


def _patroni_lines(view: View) -> Iterable[str]:
    """
    ``pg_status__patroni_etcd``: the store's state and its leader key.
    """
    leader = view.leader
    assert leader is not None
    yield HEADERS["pgstatus_patroni_store_up"]
    yield f"pgstatus_patroni_store_up {_num(leader.up)}\n"
    yield HEADERS["pgstatus_patroni_store_fresh"]
    yield f"pgstatus_patroni_store_fresh {_num(leader.fresh)}\n"
    yield HEADERS["pgstatus_patroni_leader_revision"]
    yield f"pgstatus_patroni_leader_revision {leader.revision}\n"
    yield HEADERS["pgstatus_patroni_leader_age_seconds"]
    if leader.changed_at is not None:
        age = max(0.0, time.time() - leader.changed_at)
        yield f"pgstatus_patroni_leader_age_seconds {age:.3f}\n"
    name = "pgstatus_patroni_leader"
    yield HEADERS[name]
    if leader.member is not None:
        address = "" if leader.address is None else f"{leader.address[0]}:{leader.address[1]}"
        yield (f'{name}{{member="{_escape(leader.member)}",address="{_escape(address)}"}} '
               "1\n")


def _timestamp(t: float | None) -> float | None:
    """
    A time in seconds to the millisecond, as Prometheus keeps timestamps.
    """
    return None if t is None else round(t, 3)


def _follow_lines(follow: FollowStats, hub: Hub | None) -> Iterable[str]:
    """
    Follower mode: this instance's role, the hub it follows, the age of the
    last news from it and the switches; on a hub, its followers.
    """
    name = "pgstatus_follow_mode"
    yield HEADERS[name]
    mode = follow.mode
    for m in ("hub", "starting", "following", "polling"):
        yield f'{name}{{mode="{m}"}} {_num(m == mode)}\n'
    if mode == "hub":
        yield HEADERS["pgstatus_follow_followers"]
        yield f"pgstatus_follow_followers {hub.followers if hub is not None else 0}\n"
        yield HEADERS["pgstatus_follow_snapshots_sent_total"]
        yield f"pgstatus_follow_snapshots_sent_total {hub.snapshots if hub is not None else 0}\n"
        return
    name = "pgstatus_follow_hub"
    yield HEADERS[name]
    if follow.hub is not None:
        yield f'{name}{{url="{_escape(follow.hub)}"}} 1\n'
    name = "pgstatus_follow_view_age_seconds"
    yield HEADERS[name]
    if follow.view_age is not None:
        yield f"{name} {follow.view_age:.3f}\n"
    yield HEADERS["pgstatus_follow_switches_total"]
    yield f"pgstatus_follow_switches_total {follow.switches}\n"
    yield HEADERS["pgstatus_follow_snapshots_total"]
    yield f"pgstatus_follow_snapshots_total {follow.snapshots}\n"
