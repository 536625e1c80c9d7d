"""
Timing of checks: a cumulative-bucket histogram of check durations, kept by
the monitor and rendered by ``/metrics``.
"""

from __future__ import annotations

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
