"""
At most one log line per interval about events that clients can cause as
often as they like (a request that failed, bytes twisted.web choked on): the
log must not become a way to fill a disk, and the line that is written
counts the events since the one before.
"""

from __future__ import annotations

from typing import Any


class Throttle:
    """
    Counts events; says when one deserves a line.

    :param clock: the reactor's time provider; ``None``: every event gets
        its line.
    :param interval: seconds between two lines at least.
    """

    def __init__(self, clock: Any, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._logged_at = float("-inf")
        self._unlogged = 0

    def due(self) -> int:
        """
        Count one event: the events since the last line, this one included,
        when a line is due now (the count starts again), else 0.
        """
        self._unlogged += 1
        if self._clock is not None:
            now = self._clock.seconds()
            # (a clock that stepped back does not silence the line until it catches up)
            if self._logged_at <= now < self._logged_at + self._interval:
                return 0
            self._logged_at = now
        count, self._unlogged = self._unlogged, 0
        return count
