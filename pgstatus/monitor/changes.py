"""
The log lines a new view is worth: pure functions from two consecutive
views (and the thresholds they were judged by) to ``(level, format,
fields)`` triples.  The monitor emits them; tests compare them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, count
from operator import is_not
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

    Only the positions that changed are looked at: those ``new`` names
    (:attr:`View.changed`) when it is the view published right after
    ``old``, else those whose statuses are not the same object; of those,
    only the ones whose statuses differ.  Every host's claim to be master is
    looked at only when one of those claims or the selected master changed.

    :param config: gives the thresholds the sync lines name.
    :return: ``(level, format, fields)`` triples for :meth:`Logger.emit`.
    """
    info, warn = LogLevel.info, LogLevel.warn
    out: list[tuple[LogLevel, str, dict[str, Any]]] = []
    if new.ready and not old.ready:
        out.append((info, "monitor ready: every host completed its first check", {}))
    olds, news = old.hosts, new.hosts
    if len(olds) != len(news):
        raise ValueError("views of different host lists")
    claims_moved = False
    for i in changed_positions(old, new):
        a, b = olds[i], news[i]
        if a is b or a == b:
            continue
        if _claim(a) != _claim(b):
            claims_moved = True
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
    master_moved = (am and am.index) != (bm and bm.index)
    if master_moved or (am is None) != (bm is None):
        out.append((
            info,
            "master changed master={master} previous={previous}",
            {"master": bm.name if bm else "none", "previous": am.name if am else "none"},
        ))
    # the claims can differ from the old view's only where a position's does
    claims = master_claims(new) if claims_moved or master_moved else ()
    if len(claims) > 1 and (master_moved or claims != master_claims(old)):
        out.append((
            warn,
            "split brain: several hosts report master masters={masters} selected={selected} "
            "rule={rule}",
            {"masters": ",".join(f"{name}(timeline={_n(tl)})" for _, name, tl in claims),
             "selected": bm.name if bm else "none", "rule": config.split_brain},
        ))
    return out


def changed_positions(old: View, new: View) -> Sequence[int]:
    """
    The positions where ``old`` and ``new`` may hold different statuses:
    :attr:`View.changed` when ``new`` was published right after ``old``
    (the generation after it) and says which, else every position whose
    statuses are not the same object (found without comparing them).
    """
    if new.changed is not None and new.generation == old.generation + 1:
        return new.changed
    return list(compress(count(), map(is_not, old.hosts, new.hosts)))


def master_claims(view: View) -> tuple[tuple[int, str, int | None], ...]:
    """
    ``(index, name, timeline)`` of the live hosts that report master, in
    host order.
    """
    return tuple((h.index, h.name, h.timeline) for h in view.hosts if h.alive and h.master)


def _claim(h: HostStatus) -> tuple[int, str, int | None] | None:
    return (h.index, h.name, h.timeline) if h.alive and h.master else None


def _health(s: HostStatus) -> str:
    if not s.checked:
        return "unknown"
    if not s.alive:
        return "dead"
    return "possible_dead" if s.possible_dead else "alive"


def _n(v: int | None) -> str:
    return "null" if v is None else str(v)
