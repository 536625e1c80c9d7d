"""
``GET /metrics``: the service's state and counters in the Prometheus text
exposition format (version 0.0.4), written by hand: a scrape reads the
published view and a few counters and joins strings, nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pgstatus.http.responses import Response
from pgstatus.monitor.timing import BUCKETS

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

    :param service: the :class:`~pgstatus.tap.PgStatusService` whose monitor,
        renderer and fresh-read coordinator are read.
    """

    def __init__(self, service: Any) -> None:
        self._service = service

    def __call__(self) -> Response:
        """
        Render the current state.
        """
        return Response(200, CONTENT_TYPE, "".join(self._lines()).encode())

    def _lines(self) -> Iterable[str]:
        svc = self._service
        view = svc.monitor.registry.view
        monitors = svc.monitor.monitors
        renderer = svc.api.renderer
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
        yield from per_host("pgstatus_host_timeline", "gauge",
                            "The host's timeline (absent when unknown).",
                            lambda i: hosts[i].timeline)
        yield from per_host("pgstatus_host_consecutive_failures", "gauge",
                            "Failed checks since the last successful one.",
                            lambda i: monitors[i].state.failures)
        yield from per_host("pgstatus_host_checks_total", "counter", "Checks started.",
                            lambda i: monitors[i].checks)
        yield from per_host("pgstatus_host_extra_checks_total", "counter",
                            "Out-of-schedule checks for waiting read-your-writes requests.",
                            lambda i: monitors[i].extra_checks)
        yield from per_host("pgstatus_host_connections_opened_total", "counter",
                            "PostgreSQL connections opened.",
                            lambda i: getattr(monitors[i].probe, "opened", 0))
        name = "pgstatus_host_check_duration_seconds"
        yield family(name, "histogram", "Duration of completed checks.")
        for m, lab in zip(monitors, labels, strict=True):
            hist = m.durations
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
        yield from _follow_lines(svc, family)


def _follow_lines(svc: Any, family: Callable[[str, str, str], str]) -> Iterable[str]:
    """
    Follower mode: this instance's role, the hub it follows, the age of the
    last news from it and the switches; on a hub, its followers.
    """
    follower = getattr(svc, "follower", None)
    name = "pgstatus_follow_mode"
    yield family(name, "gauge", "Where host states come from: hub (polling, may be "
                                "followed), following (a hub's snapshots) or polling (a "
                                "follower polling on its own).")
    mode = "hub" if follower is None else follower.mode
    for m in ("hub", "starting", "following", "polling"):
        yield f'{name}{{mode="{m}"}} {_num(m == mode)}\n'
    if follower is None:
        hub = getattr(svc, "hub", None)  # made at the first follower's request
        yield family("pgstatus_follow_followers", "gauge", "Followers streaming now.")
        yield f"pgstatus_follow_followers {hub.followers if hub is not None else 0}\n"
        yield family("pgstatus_follow_snapshots_sent_total", "counter",
                     "Snapshots encoded for followers (one per change, for all).")
        yield f"pgstatus_follow_snapshots_sent_total {hub.snapshots if hub is not None else 0}\n"
        return
    name = "pgstatus_follow_hub"
    yield family(name, "gauge", "1 for the hub whose stream is open or being opened.")
    if follower.hub is not None:
        yield f'{name}{{url="{_escape(follower.hub)}"}} 1\n'
    name = "pgstatus_follow_view_age_seconds"
    yield family(name, "gauge", "Seconds since the last event (snapshot or heartbeat) from "
                                "a hub (absent before the first).")
    if follower.last_event is not None:
        yield f"{name} {svc._reactor.seconds() - follower.last_event:.3f}\n"
    yield family("pgstatus_follow_switches_total", "counter",
                 "Switches between following a hub and polling on our own.")
    yield f"pgstatus_follow_switches_total {follower.switches}\n"
    yield family("pgstatus_follow_snapshots_total", "counter", "Snapshots published.")
    yield f"pgstatus_follow_snapshots_total {follower.snapshots}\n"

