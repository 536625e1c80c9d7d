"""
Host selection: pure functions from a tuple of host statuses and a
request's filters to the host to answer with.

Nothing here does I/O or reads a clock; round-robin state is passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pgstatus.model.status import HostStatus, View


@dataclass(frozen=True, slots=True)
class Filters:
    """
    The constraints of one replica request.

    :ivar lag_ms: maximum ``lag_ms``, or ``None`` for no limit.
    :ivar lag_bytes: maximum ``lag_bytes``, or ``None`` for no limit.
    :ivar mode: ``"and"``: every given limit must hold; ``"or"``: one is
        enough (``/sync_by_time_or_bytes``).
    :ivar min_lsn: the replica must have replayed this position, on the
        master's timeline.
    :ivar timeline: the replica must be known to be on this timeline.
    """

    lag_ms: int | None = None
    lag_bytes: int | None = None
    mode: Literal["and", "or"] = "and"
    min_lsn: int | None = None
    timeline: int | None = None
    #: judge lag_ms / lag_bytes by the host's sync flags (the global
    #: thresholds with eviction hysteresis) instead of comparing the lag
    sync_time: bool = False
    sync_bytes: bool = False
    #: keep at least this many replicas eligible (serving floor)
    floor: int = 0


def select_master(hosts: Sequence[HostStatus], rule: str = "first") -> HostStatus | None:
    """
    The master to report: among the hosts reporting master, the fully
    responsive ones if any, else the possibly dead ones; within that group
    the first in host order (``rule="first"``, the original's), or the one
    on the highest timeline, then the first in host order
    (``rule="timeline"``: a promoted standby always starts a new timeline,
    so an old master that still accepts writes loses to it).  ``None`` if
    no host reports master.
    """
    if rule == "timeline":
        for dead in (False, True):
            group = [h for h in hosts if h.alive and h.master and h.possible_dead is dead]
            if group:
                # max() keeps the first of equal timelines: host order
                return max(group, key=lambda h: -1 if h.timeline is None else h.timeline)
        return None
    fallback = None
    for h in hosts:
        if h.alive and h.master:
            if not h.possible_dead:
                return h
            if fallback is None:
                fallback = h
    return fallback


def replayed(h: HostStatus, lsn: int) -> bool:
    """
    Whether replica ``h`` has replayed WAL up to ``lsn``.  A position inside
    a page header (as ``pg_current_wal_insert_lsn()`` gives after a record
    that ends at a page boundary) is met by a replica at that page's start.
    """
    through = h.replayed_through if h.replayed_through is not None else h.lsn
    return through is not None and through >= lsn


def matches(h: HostStatus, f: Filters, master: HostStatus | None) -> bool:
    """
    Whether replica ``h`` passes every filter.  An unknown lag meets no
    threshold.
    """
    if f.lag_ms is not None or f.lag_bytes is not None:
        if f.lag_ms is None:
            ok_ms = True
        elif f.sync_time:
            ok_ms = h.sync_by_time
        else:
            ok_ms = h.lag_ms is not None and h.lag_ms <= f.lag_ms
        if f.lag_bytes is None:
            ok_bytes = True
        elif f.sync_bytes:
            ok_bytes = h.sync_by_bytes
        else:
            ok_bytes = h.lag_bytes is not None and h.lag_bytes <= f.lag_bytes
        if f.mode == "or" and f.lag_ms is not None and f.lag_bytes is not None:
            ok_ms = ok_ms or ok_bytes
            ok_bytes = True
        if not (ok_ms and ok_bytes):
            return False
    master_tl = master.timeline if master is not None else None
    if f.min_lsn is not None:
        if not replayed(h, f.min_lsn):
            return False
        if h.timeline is not None and master_tl is not None and h.timeline != master_tl:
            return False
    if f.timeline is not None:
        if h.timeline != f.timeline:
            return False
        if master_tl is not None and master_tl > f.timeline:
            return False
    return True


def candidates(hosts: Sequence[HostStatus], f: Filters, master: HostStatus | None
               ) -> tuple[HostStatus, ...]:
    """
    The replicas of the best available health tier that pass ``f``: fully
    responsive ones if any pass, else possibly dead ones.  Host order.
    """
    best: list[HostStatus] = []
    weak: list[HostStatus] = []
    for h in hosts:
        if not h.alive or h.master:
            continue
        if matches(h, f, master):
            (weak if h.possible_dead else best).append(h)
    return tuple(best or weak)


@dataclass(frozen=True, slots=True)
class Locality:
    """
    Where this pg-status instance runs; a dimension is ``None`` unless its
    metadata is complete.
    """

    dc: str | None = None
    geo: str | None = None


def local_group(replicas: Sequence[HostStatus], where: Locality) -> tuple[HostStatus, ...]:
    """
    Narrow ``replicas`` to those in the current DC, else the current geo,
    else keep all.
    """
    if where.dc is not None:
        same = tuple(h for h in replicas if h.dc == where.dc)
        if same:
            return same
    if where.geo is not None:
        same = tuple(h for h in replicas if h.geo == where.geo)
        if same:
            return same
    return tuple(replicas)


def with_floor(hosts: Sequence[HostStatus], found: Sequence[HostStatus], f: Filters,
               master: HostStatus | None, by_bytes: bool) -> tuple[HostStatus, ...]:
    """
    The serving floor: when fewer than ``f.floor`` replicas pass ``f``, add
    the least-lagging live replicas that pass its other filters (``min_lsn``,
    ``timeline``), healthy ones first, until there are ``f.floor``.  Host
    order is kept.
    """
    if len(found) >= f.floor:
        return tuple(found)
    rest = Filters(min_lsn=f.min_lsn, timeline=f.timeline)
    taken = {h.index for h in found}
    extra = [h for h in hosts
             if h.alive and not h.master and h.index not in taken and matches(h, rest, master)]

    def lag(h: HostStatus) -> tuple[bool, float, float]:
        first, second = (h.lag_bytes, h.lag_ms) if by_bytes else (h.lag_ms, h.lag_bytes)
        return (h.possible_dead, float("inf") if first is None else first,
                float("inf") if second is None else second)

    extra.sort(key=lag)
    chosen = list(found) + extra[: f.floor - len(found)]
    chosen.sort(key=lambda h: h.index)
    return tuple(chosen)


def most_sync(replicas: Sequence[HostStatus]) -> HostStatus | None:
    """
    The replica with the smallest ``lag_bytes``; ties go to host order.
    Replicas of unknown byte lag are never chosen.
    """
    best, best_lag = None, 0
    for h in replicas:
        if h.lag_bytes is not None and (best is None or h.lag_bytes < best_lag):
            best, best_lag = h, h.lag_bytes
    return best


class RoundRobin:
    """
    Round-robin counters, one per distinct group of hosts, so that requests
    for different groups do not disturb each other's rotation.

    :param limit: how many groups to remember before starting afresh.
    """

    def __init__(self, limit: int = 4096) -> None:
        self._next: dict[tuple[int, ...], int] = {}
        self._limit = limit

    def pick(self, group: Sequence[HostStatus]) -> HostStatus:
        """
        The next host of a non-empty ``group``.
        """
        if len(group) == 1:
            return group[0]
        return group[self.next(tuple(h.index for h in group), len(group))]

    def next(self, key: tuple[int, ...], size: int) -> int:
        """
        The next position, ``0 <= n < size``, in the rotation of the group
        whose host indices are ``key``.
        """
        n = self._next.get(key)
        if n is None:
            if len(self._next) >= self._limit:
                self._next.clear()
            n = 0
        self._next[key] = (n + 1) % size
        return n


def fallback_reason(view: View, f: Filters) -> str:
    """
    Why no replica qualifies: ``no_replica`` (none alive), ``lag`` (none
    within the lag limits), ``timeline`` or ``min_lsn``.
    """
    replicas = [h for h in view.hosts if h.alive and not h.master]
    if not replicas:
        return "no_replica"
    lag_only = Filters(f.lag_ms, f.lag_bytes, f.mode)
    within = [h for h in replicas if matches(h, lag_only, view.master)]
    if not within:
        return "lag"
    if f.timeline is not None and not any(
            matches(h, Filters(timeline=f.timeline), view.master) for h in within):
        return "timeline"
    return "min_lsn"


def rendezvous(group: tuple[HostStatus, ...], key: str) -> HostStatus:
    """
    The member of ``group`` with the highest hash of ``(key, host name)``
    (rendezvous hashing): a session keeps its replica while that replica
    stays eligible, and when the group changes only the sessions of the
    replicas that left or joined move.
    """
    from hashlib import blake2b  # only sticky requests use it (and OpenSSL's bindings)

    best, best_score = group[0], b""
    k = key.encode("utf-8", "surrogatepass")
    for h in group:
        score = blake2b(k + b"\0" + h.name.encode("utf-8", "surrogatepass"),
                                digest_size=8).digest()
        if score > best_score:
            best, best_score = h, score
    return best
