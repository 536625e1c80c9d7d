"""
What ``/metrics`` reads besides the view: per-host check counters and a
cumulative-bucket histogram of check durations, kept by the monitor, and
follower mode's state.  The monitor side fills them; the HTTP side reads
them through a :class:`StatsSource`, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

#: upper bounds (seconds) of the check duration histogram
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    """
    Cumulative-bucket histogram of durations in seconds.
    """

    __slots__ = ("counts", "total", "count")

    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        """
        Record one duration.
        """
        self.total += seconds
        self.count += 1
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1


@dataclass(frozen=True, slots=True)
class HostCounters:
    """
    One host's counters, as of the moment they were read.

    :ivar failures: failed checks since the last successful one.
    :ivar checks: checks started.
    :ivar extra_checks: out-of-schedule checks (fresh reads).
    :ivar connections_opened: PostgreSQL connections opened.
    :ivar durations: durations of completed checks (live, not a copy).
    :ivar last_completed: when the host's last check ended (the clock's
        time, seconds), or ``None`` before the first check of this
        instance's schedule and while the schedule is stopped (a follower
        that mirrors a hub checks nothing).
    """

    failures: int
    checks: int
    extra_checks: int
    connections_opened: int
    durations: Histogram
    last_completed: float | None = None


@dataclass(frozen=True, slots=True)
class FollowStats:
    """
    Follower mode's state, as of the moment it was read.

    :ivar mode: ``hub`` (polling, may be followed), ``starting``,
        ``following`` (a hub's snapshots) or ``polling`` (a follower polling
        on its own).
    :ivar hub: the URL of the hub whose stream is open or being opened.
    :ivar view_age: seconds since the last event from a hub, if any.
    :ivar switches: switches between following and polling.
    :ivar snapshots: snapshots published.
    """

    mode: str
    hub: str | None = None
    view_age: float | None = None
    switches: int = 0
    snapshots: int = 0


class StatsSource(Protocol):
    """
    Where ``/metrics`` reads the monitor side's counters.
    """

    def host_counters(self) -> Sequence[HostCounters]:
        """
        One :class:`HostCounters` per configured host, in host order.
        """

    def follow_stats(self) -> FollowStats:
        """
        Follower mode's state (``mode="hub"`` when not following).
        """
