"""
Fresh read-your-writes without the master (an opt-in addition).

A ``min_lsn`` request that no replica satisfies yet may wait up to
``wait_ms`` (or ``pg_status__min_lsn_wait_ms``): the replicas that are
behind get an immediate extra check, and the request is answered as soon
as a published view has a replica that qualifies, or with the master when
the wait ends.  Waiting requests are Deferreds re-examined only when a
check publishes a new view.  A replica checked before it had replayed the
write is asked again after 10 ms, 20 ms, 40 ms, ... (one timer for all
waiting requests, which looks at them only when it fires), so a read is not
left to the next scheduled check, nor does a replica that stays behind get
checked in a loop.  Asking is not checking: the monitor brings a host's
next check forward under one cap per host (``extra_check_interval_ms``,
shared with followers' requests), so no number of waiting requests checks
a host more often than that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime

from pgstatus.model.status import View

#: the most requests waiting at once; more are answered at once
MAX_WAITERS = 10000
#: a waiting request asks again for checks of the hosts that are still
#: behind after this long, then after twice as long, and so on
RECHECK_AFTER = 0.01


class _Waiter:
    __slots__ = ("test", "d", "timer", "hosts", "again_at", "gap")

    d: Deferred[None]
    timer: Any

    def __init__(self, test: Callable[[View], bool], hosts: tuple[int, ...],
                 now: float) -> None:
        self.test = test
        self.hosts = hosts
        self.gap = RECHECK_AFTER
        self.again_at = now + RECHECK_AFTER


class FreshReads:
    """
    Coordinates waiting ``min_lsn`` requests with extra replica checks.

    :param clock: time and timers.
    :param check_soon: ``(host_index) -> None``: ask for an extra check of
        a host, which the monitor grants under its per-host cap (see
        :meth:`pgstatus.monitor.scheduler.HostMonitor.check_soon`).
    """

    def __init__(self, clock: IReactorTime, check_soon: Callable[[int], None]) -> None:
        self._clock = clock
        self._check_soon = check_soon
        # insertion-ordered, removal in O(1)
        self._waiters: dict[_Waiter, None] = {}
        self._recheck: Any = None
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
        Cancelling the Deferred (its client went away) ends the wait.
        """
        if len(self._waiters) >= MAX_WAITERS:
            return succeed(None)
        hosts = tuple(hosts)
        waiter = _Waiter(test, hosts, self._clock.seconds())
        d: Deferred[None] = Deferred(lambda _: self._forget(waiter))
        waiter.d = d
        waiter.timer = self._clock.callLater(timeout, self._expire, waiter)
        self._waiters[waiter] = None
        self._ask(hosts)
        # A request due later than the timer needs nothing (the timer looks
        # at every waiting request when it fires): O(1) per request.
        timer = self._recheck
        if timer is None or not timer.active():
            self._recheck = self._clock.callLater(RECHECK_AFTER, self._ask_again)
        return d

    def _ask(self, hosts: Iterable[int]) -> None:
        for i in hosts:
            self.extra_checks_requested += 1
            self._check_soon(i)

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._waiters:
            del self._waiters[waiter]
            if waiter.timer.active():
                waiter.timer.cancel()

    def _expire(self, waiter: _Waiter) -> None:
        if waiter not in self._waiters:
            return
        del self._waiters[waiter]
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
            del self._waiters[w]
            if w.timer.active():
                w.timer.cancel()
        for w in done:
            w.d.callback(None)

    def _ask_again(self) -> None:
        """
        The view still does not serve these waiting requests (the replica
        had not replayed the write when it was checked, or no check could
        start): ask again for their hosts' checks, and double their gap.
        """
        self._recheck = None
        now = self._clock.seconds()
        hosts: set[int] = set()
        for w in self._waiters:
            if now >= w.again_at - 1e-9:
                hosts.update(w.hosts)
                w.gap *= 2
                w.again_at = now + w.gap
        self._ask(sorted(hosts))
        if self._waiters:
            # the earliest request due next (a pass over them, once per
            # firing; firings are spaced by the doubling gaps)
            due = min(w.again_at for w in self._waiters)
            self._recheck = self._clock.callLater(max(0.0, due - now), self._ask_again)
