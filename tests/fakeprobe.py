"""
A probe whose checks a test finishes by hand, and the observations it
answers with: the monitor's side of a check without PostgreSQL.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from pgstatus.monitor.failures import CheckFailed
from pgstatus.monitor.lag import Observation
from pgstatus.monitor.turns import Deadline


class FakeProbe:
    """
    A probe whose checks the test finishes by hand.  ``abort`` fails the
    pending check as a real probe does when its connection is closed.
    """

    def __init__(self) -> None:
        self.pending: Deferred | None = None
        self.starts: list[float] = []
        self.aborts = 0
        self.closed = False
        self.deadline: Deadline | None = None

    def check(self, started: float, deadline: Deadline) -> Deferred:
        assert self.pending is None, "checks of one host overlapped"
        self.starts.append(started)
        self.deadline = deadline
        deadline.start()
        self.pending = Deferred()
        return self.pending

    def _take(self) -> Deferred:
        d, self.pending = self.pending, None
        assert d is not None, "no check in progress"
        return d

    def answer(self, obs: Observation) -> None:
        self._take().callback(obs)

    def fail(self, late: bool = False) -> None:
        self._take().errback(CheckFailed("connect", "boom", late=late))

    def abort(self) -> None:
        self.aborts += 1
        if self.pending is not None:
            self._take().errback(CheckFailed("consume_input", "connection closed"))

    def close(self) -> None:
        self.closed = True
        self.abort()


def master_obs(clock: IReactorTime, lsn: int = 1000, timeline: int = 1) -> Observation:
    now = clock.seconds()
    return Observation(started=now, sent=now, received=now, server_now=now, in_recovery=False,
                       wal_lsn=lsn, insert_lsn=lsn, timeline=timeline)


def replica_obs(clock: IReactorTime, replay: int = 1000, timeline: int = 1) -> Observation:
    now = clock.seconds()
    return Observation(started=now, sent=now, received=now, server_now=now, in_recovery=True,
                       timeline=timeline, replay_lsn=replay, receive_lsn=replay,
                       replay_ts=now - 5.0)
