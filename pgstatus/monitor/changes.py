"""
The log lines a new view is worth: pure functions from two consecutive
views (and the thresholds they were judged by) to ``(level, format,
fields)`` triples.  The monitor emits them; tests compare them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.logger import LogLevel

from pgstatus.config.settings import Config
from pgstatus.model.status import HostStatus, View


def describe_changes(old: View, new: View, config: Config
                     ) -> Sequence[tuple[LogLevel, str, dict[str, Any]]]:
    """
    The transitions worth a log line between two views: readiness, role,
    availability and crossings of the global sync thresholds.  A host that
    becomes possibly dead or dead is a warning; everything else is info.

    The lines the original service also logs use its words and fields
    (``host state changed``, ``host role changed``, ``replica
    synchronization changed``); readiness, the master change and the split
    brain warning (more than one live host reports master: once when the
    set of such hosts, their timelines or the selected one changes, not
    once per check) are ours.

    :param config: gives the thresholds the sync lines name.
    :return: ``(level, format, fields)`` triples for :meth:`Logger.emit`.
    """
    info, warn = LogLevel.info, LogLevel.warn
    out: list[tuple[LogLevel, str, dict[str, Any]]] = []
    if new.ready and not old.ready:
        out.append((info, "monitor ready: every host completed its first check", {}))
    for a, b in zip(old.hosts, new.hosts, strict=True):
        if a == b:
            continue
        name = b.name
        state_a, state_b = _health(a), _health(b)
        role = "master" if b.master else "replica"
        if state_a != state_b and state_b == "alive":
            out.append((
                info,
                "host state changed host={host} state={state} role={role}",
                {"host": name, "state": state_b, "role": role},
            ))
        elif state_a != state_b:
            out.append((
                warn,
                "host state changed host={host} state={state}",
                {"host": name, "state": state_b},
            ))
        elif b.alive and a.alive and a.master != b.master:
            out.append((
                info,
                "host role changed host={host} role={role}",
                {"host": name, "role": role},
            ))
        if b.alive and not b.master and a.alive and not a.master:
            if a.sync_by_time != b.sync_by_time:
                out.append((
                    info,
                    "replica synchronization changed host={host} dimension=time "
                    "synchronous={sync} lag_ms={lag} threshold_ms={threshold}",
                    {"host": name, "sync": str(b.sync_by_time).lower(), "lag": _n(b.lag_ms),
                     "threshold": config.sync_max_lag_ms},
                ))
            if a.sync_by_bytes != b.sync_by_bytes:
                out.append((
                    info,
                    "replica synchronization changed host={host} dimension=bytes "
                    "synchronous={sync} lag_bytes={lag} threshold_bytes={threshold}",
                    {"host": name, "sync": str(b.sync_by_bytes).lower(),
                     "lag": _n(b.lag_bytes), "threshold": config.sync_max_lag_bytes},
                ))
    am, bm = old.master, new.master
    if (am and am.index) != (bm and bm.index) or (am is None) != (bm is None):
        out.append((
            info,
            "master changed master={master} previous={previous}",
            {"master": bm.name if bm else "none", "previous": am.name if am else "none"},
        ))
    claims = master_claims(new)
    if len(claims) > 1 and (claims != master_claims(old)
                            or (am and am.index) != (bm and bm.index)):
        out.append((
            warn,
            "split brain: several hosts report master masters={masters} selected={selected} "
            "rule={rule}",
            {"masters": ",".join(f"{name}(timeline={_n(tl)})" for _, name, tl in claims),
             "selected": bm.name if bm else "none", "rule": config.split_brain},
        ))
    return out


def master_claims(view: View) -> tuple[tuple[int, str, int | None], ...]:
    """
    ``(index, name, timeline)`` of the live hosts that report master, in
    host order.
    """
    return tuple((h.index, h.name, h.timeline) for h in view.hosts if h.alive and h.master)


def _health(s: HostStatus) -> str:
    if not s.checked:
        return "unknown"
    if not s.alive:
        return "dead"
    return "possible_dead" if s.possible_dead else "alive"


def _n(v: int | None) -> str:
    return "null" if v is None else str(v)
