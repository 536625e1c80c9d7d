"""
``GET /metrics``: the service's state and counters in the Prometheus text
exposition format (version 0.0.4), written by hand: a scrape reads the
published view and a few counters and joins strings, nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pgstatus.http.answer import Response
from pgstatus.http.responses import Renderer
from pgstatus.model.stats import BUCKETS, FollowStats, StatsSource
from pgstatus.model.status import View

if TYPE_CHECKING:
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
    Builds the ``/metrics`` answer.

    :param current: returns the published view.
    :param stats: the monitor side's counters.
    :param renderer: the HTTP side's request and fallback counters.
    :param hub: returns the followers' streams, if any were made.
    """

    def __init__(self, current: Callable[[], View], stats: StatsSource, renderer: Renderer,
                 hub: Callable[[], Hub | None]) -> None:
        self._current = current
        self._stats = stats
        self._renderer = renderer
        self._hub = hub

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

        def family(name: str, kind: str, help_: str) -> str:
            return f"# HELP {name} {help_}\n# TYPE {name} {kind}\n"

        yield family("pgstatus_ready", "gauge", "1 once every host completed its first check.")
        yield f"pgstatus_ready {_num(view.ready)}\n"

        def per_host(name: str, kind: str, help_: str,
                     value: Callable[[int], float | int | bool | None]) -> Iterable[str]:
            yield family(name, kind, help_)
            for i, lab in enumerate(labels):
                v = value(i)
                if v is not None:
                    yield f"{name}{{{lab}}} {_num(v)}\n"

        hosts = view.hosts
        yield family("pgstatus_hosts_reporting_master", "gauge",
                     "Live hosts that report master (more than 1: a split brain).")
        yield f"pgstatus_hosts_reporting_master {sum(1 for h in hosts if h.alive and h.master)}\n"
        yield from per_host("pgstatus_host_alive", "gauge", "The host is alive.",
                            lambda i: hosts[i].alive)
        yield from per_host("pgstatus_host_possible_dead", "gauge",
                            "The last check of the host failed.",
                            lambda i: hosts[i].possible_dead)
        yield from per_host("pgstatus_host_master", "gauge",
                            "The host is a master (as of its last successful check).",
                            lambda i: hosts[i].master)
        yield from per_host("pgstatus_host_selected_master", "gauge",
                            "The host is the master /master answers with.",
                            lambda i: view.master is not None and view.master.index == i)
        yield from per_host("pgstatus_host_lag_ms", "gauge",
                            "Replica time lag in milliseconds (absent when unknown).",
                            lambda i: hosts[i].lag_ms)
        yield from per_host("pgstatus_host_lag_bytes", "gauge",
                            "Replica WAL lag in bytes (absent when unknown).",
                            lambda i: hosts[i].lag_bytes)
        yield from per_host("pgstatus_host_sync_by_time", "gauge",
                            "The host is time-synchronous (sync_by_time in /hosts).",
                            lambda i: hosts[i].sync_by_time)
        yield from per_host("pgstatus_host_sync_by_bytes", "gauge",
                            "The host is byte-synchronous (sync_by_bytes in /hosts).",
                            lambda i: hosts[i].sync_by_bytes)
        yield from per_host("pgstatus_host_timeline", "gauge",
                            "The host's timeline (absent when unknown).",
                            lambda i: hosts[i].timeline)
        yield from per_host("pgstatus_host_consecutive_failures", "gauge",
                            "Failed checks since the last successful one.",
                            lambda i: counters[i].failures)
        yield from per_host("pgstatus_host_checks_total", "counter", "Checks started.",
                            lambda i: counters[i].checks)
        yield from per_host("pgstatus_host_extra_checks_total", "counter",
                            "Out-of-schedule checks for waiting read-your-writes requests.",
                            lambda i: counters[i].extra_checks)
        yield from per_host("pgstatus_host_connections_opened_total", "counter",
                            "PostgreSQL connections opened.",
                            lambda i: counters[i].connections_opened)
        name = "pgstatus_host_check_duration_seconds"
        yield family(name, "histogram", "Duration of completed checks.")
        for c, lab in zip(counters, labels, strict=True):
            hist = c.durations
            for bound, count in zip(BUCKETS, hist.counts, strict=True):
                yield f'{name}_bucket{{{lab},le="{bound}"}} {count}\n'
            yield f'{name}_bucket{{{lab},le="+Inf"}} {hist.count}\n'
            yield f"{name}_sum{{{lab}}} {hist.total!r}\n"
            yield f"{name}_count{{{lab}}} {hist.count}\n"
        name = "pgstatus_http_requests_total"
        yield family(name, "counter", "HTTP requests answered, by route and status.")
        for (route, status), n in sorted(renderer.requests.items()):
            yield f'{name}{{route="{_escape(route)}",code="{status}"}} {n}\n'
        name = "pgstatus_replica_fallbacks_total"
        yield family(name, "counter",
                     "Replica requests answered with the master, by reason "
                     "(no_replica, lag, min_lsn, timeline).")
        for reason in ("no_replica", "lag", "min_lsn", "timeline"):
            yield f'{name}{{reason="{reason}"}} {renderer.fallbacks.get(reason, 0)}\n'
        yield from _follow_lines(self._stats.follow_stats(), self._hub(), family)
        if view.leader is not None:
            yield from _patroni_lines(view, family)


def _patroni_lines(view: View, family: Callable[[str, str, str], str]) -> Iterable[str]:
    """
    ``pg_status__patroni_etcd``: the store's state and its leader key.
    """
    leader = view.leader
    assert leader is not None
    yield family("pgstatus_patroni_store_up", "gauge",
                 "1 while Patroni's store is read (the watch open, the last read successful).")
    yield f"pgstatus_patroni_store_up {_num(leader.up)}\n"
    yield family("pgstatus_patroni_store_fresh", "gauge",
                 "1 while the store was read within patroni_ttl: the leader key decides the "
                 "master (else patroni_unreadable does).")
    yield f"pgstatus_patroni_store_fresh {_num(leader.fresh)}\n"
    yield family("pgstatus_patroni_leader_revision", "gauge",
                 "The leader key's mod_revision in etcd (0: no leader key).")
    yield f"pgstatus_patroni_leader_revision {leader.revision}\n"
    yield family("pgstatus_patroni_leader_age_seconds", "gauge",
                 "Seconds since the leader key was seen to change holder (absent before "
                 "the first read).")
    if leader.changed_at is not None:
        age = max(0.0, time.time() - leader.changed_at)
        yield f"pgstatus_patroni_leader_age_seconds {age:.3f}\n"
    name = "pgstatus_patroni_leader"
    yield family(name, "gauge", "1 for the member holding the leader key, with the address of "
                 "its conn_url (absent without a leader key).")
    if leader.member is not None:
        address = "" if leader.address is None else f"{leader.address[0]}:{leader.address[1]}"
        yield (f'{name}{{member="{_escape(leader.member)}",address="{_escape(address)}"}} '
               "1\n")


def _follow_lines(follow: FollowStats, hub: Hub | None,
                  family: Callable[[str, str, str], str]) -> Iterable[str]:
    """
    Follower mode: this instance's role, the hub it follows, the age of the
    last news from it and the switches; on a hub, its followers.
    """
    name = "pgstatus_follow_mode"
    yield family(name, "gauge", "Where host states come from: hub (polling, may be "
                                "followed), following (a hub's snapshots) or polling (a "
                                "follower polling on its own).")
    mode = follow.mode
    for m in ("hub", "starting", "following", "polling"):
        yield f'{name}{{mode="{m}"}} {_num(m == mode)}\n'
    if mode == "hub":
        yield family("pgstatus_follow_followers", "gauge", "Followers streaming now.")
        yield f"pgstatus_follow_followers {hub.followers if hub is not None else 0}\n"
        yield family("pgstatus_follow_snapshots_sent_total", "counter",
                     "Snapshots encoded for followers (one per change, for all).")
        yield f"pgstatus_follow_snapshots_sent_total {hub.snapshots if hub is not None else 0}\n"
        return
    name = "pgstatus_follow_hub"
    yield family(name, "gauge", "1 for the hub whose stream is open or being opened.")
    if follow.hub is not None:
        yield f'{name}{{url="{_escape(follow.hub)}"}} 1\n'
    name = "pgstatus_follow_view_age_seconds"
    yield family(name, "gauge", "Seconds since the last event (snapshot or heartbeat) from "
                                "a hub (absent before the first).")
    if follow.view_age is not None:
        yield f"{name} {follow.view_age:.3f}\n"
    yield family("pgstatus_follow_switches_total", "counter",
                 "Switches between following a hub and polling on our own.")
    yield f"pgstatus_follow_switches_total {follow.switches}\n"
    yield family("pgstatus_follow_snapshots_total", "counter", "Snapshots published.")
    yield f"pgstatus_follow_snapshots_total {follow.snapshots}\n"

