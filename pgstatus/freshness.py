"""
Fresh read-your-writes without the master (an opt-in addition).

A ``min_lsn`` request that no replica satisfies yet may wait up to
``wait_ms`` (or ``pg_status__min_lsn_wait_ms``): the replicas that are
behind get an immediate extra check, and the request is answered as soon
as a published view has a replica that qualifies, or with the master when
the wait ends.  Waiting requests cost nothing while they wait: they are
Deferreds re-examined only when a check publishes a new view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from pgstatus.state import View

#: the shortest time between two extra checks of one host
MIN_EXTRA_INTERVAL = 0.01
#: the most requests waiting at once; more are answered at once
MAX_WAITERS = 10000


class _Waiter:
    __slots__ = ("test", "d", "timer")

    def __init__(self, test: Callable[[View], bool], d: Deferred[None], timer: Any) -> None:
        self.test = test
        self.d = d
        self.timer = timer


class FreshReads:
    """
    Coordinates waiting ``min_lsn`` requests with extra replica checks.

    :param clock: time and timers.
    :param check_soon: ``(host_index) -> None``: start an extra check of a
        host unless one is running (see
        :meth:`pgstatus.monitor.HostMonitor.check_soon`).
    """

    def __init__(self, clock: IReactorTime, check_soon: Callable[[int], None]) -> None:
        self._clock = clock
        self._check_soon = check_soon
        self._waiters: list[_Waiter] = []
        #: extra checks requested (for measurements)
        self.extra_checks_requested = 0

    @property
    def waiting(self) -> int:
        """
        Requests waiting now.
        """
        return len(self._waiters)

    def wait(self, test: Callable[[View], bool], timeout: float,
             hosts: Iterable[int]) -> Deferred[None]:
        """
        Fire (with ``None``) once a published view passes ``test``, or after
        ``timeout`` seconds, whichever comes first.  Checks ``hosts`` now.
        """
        d: Deferred[None] = Deferred()
        if len(self._waiters) >= MAX_WAITERS:
            d.callback(None)
            return d
        waiter = _Waiter(test, d, None)
        waiter.timer = self._clock.callLater(timeout, self._expire, waiter)
        self._waiters.append(waiter)
        for i in hosts:
            self.extra_checks_requested += 1
            self._check_soon(i)
        return d

    def _expire(self, waiter: _Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            return
        waiter.d.callback(None)

    def published(self, old: View, new: View) -> None:
        """
        Registry observer: release the waiters the new view satisfies.
        """
        if not self._waiters:
            return
        done = [w for w in self._waiters if w.test(new)]
        if not done:
            return
        for w in done:
            self._waiters.remove(w)
            if w.timer.active():
                w.timer.cancel()
        for w in done:
            w.d.callback(None)
