"""
Timing primitives of the monitor, driven by an injected clock:

- :class:`ConnectTurns`: new PostgreSQL connections negotiate TLS and
  authentication one at a time, with their starts spaced out.
- :class:`Deadline`: a check's deadline that can be paused while the check
  waits for something that must not count (DNS, a connection turn).
- :class:`StartPacer`: the checks that fall due in one reactor turn start
  for a bounded time in that turn; the others start in the next turns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

#: pause after a setup that reached TLS or password authentication
AUTH_PAUSE = 0.1
#: the longest a connection may hold its turn
TURN_LIMIT = 1.0
#: the upper bound of the spacing between connection starts
MAX_SPACING = 0.25
#: seconds of check starts in one reactor turn, past which the checks due
#: start in the next turns
START_BUDGET = 0.001


class Turn:
    """
    A granted turn.  Release it exactly once.
    """

    def __init__(self, owner: ConnectTurns) -> None:
        self._owner = owner
        self._released = False

    def release(self, reached_auth: bool) -> None:
        """
        Give the turn back.

        :param reached_auth: the setup got as far as TLS or password
            authentication, so the next one waits :data:`AUTH_PAUSE`.
        """
        if not self._released:
            self._released = True
            self._owner._release(reached_auth)


class ConnectTurns:
    """
    One connection setup at a time, starts at least ``spacing`` seconds
    apart, and :data:`AUTH_PAUSE` after a setup that reached
    authentication.

    :param clock: the reactor's time provider.
    :param spacing: ``min(sleep_ms / number_of_hosts, 250 ms)``, in seconds.
    """

    def __init__(self, clock: IReactorTime, spacing: float) -> None:
        self._clock = clock
        self._spacing = spacing
        self._waiting: deque[Deferred[Turn]] = deque()
        self._later: deque[Deferred[Turn]] = deque()
        self._holder: Turn | None = None
        self._not_before = float("-inf")
        self._wakeup: IDelayedCall | None = None

    @classmethod
    def for_hosts(cls, clock: IReactorTime, sleep_ms: int, hosts: int) -> ConnectTurns:
        """
        Turns with the spacing the specification gives for ``hosts`` hosts.
        """
        return cls(clock, min(sleep_ms / 1000 / max(hosts, 1), MAX_SPACING))

    def respace(self, sleep_ms: int, hosts: int) -> None:
        """
        Adopt the spacing for a reloaded ``sleep_ms`` or host count.
        """
        self._spacing = min(sleep_ms / 1000 / max(hosts, 1), MAX_SPACING)

    @property
    def busy(self) -> bool:
        """
        A connection is being set up or waits for its turn: aged
        connections should keep serving rather than join the queue.
        """
        return self._holder is not None or bool(self._waiting) or bool(self._later)

    def acquire(self, urgent: bool = True) -> Deferred[Turn]:
        """
        Wait for a turn.  Cancelling the Deferred leaves the queue.

        :param urgent: ``False`` for a host already dead: it waits behind
            every urgent request, so hosts that hang during setup cannot keep
            live hosts from reconnecting.
        """
        d: Deferred[Turn] = Deferred(self._cancel)
        (self._waiting if urgent else self._later).append(d)
        self._grant()
        return d

    def _cancel(self, d: Deferred[Turn]) -> None:
        for q in (self._waiting, self._later):
            try:
                q.remove(d)
            except ValueError:
                pass

    def _release(self, reached_auth: bool) -> None:
        self._holder = None
        if reached_auth:
            self._not_before = max(self._not_before, self._clock.seconds() + AUTH_PAUSE)
        self._grant()

    def _grant(self) -> None:
        if self._holder is not None or not (self._waiting or self._later):
            return
        now = self._clock.seconds()
        if now < self._not_before:
            if self._wakeup is None or not self._wakeup.active():
                self._wakeup = self._clock.callLater(self._not_before - now, self._grant)
            return
        d = (self._waiting or self._later).popleft()
        self._holder = turn = Turn(self)
        self._not_before = now + self._spacing
        d.callback(turn)


class Deadline:
    """
    A pausable countdown that calls ``expired`` when the time it ran
    reaches ``budget`` seconds.

    :param clock: the reactor's time provider.
    :param budget: seconds of running time allowed.
    :param expired: called once, on expiry.
    """

    def __init__(self, clock: IReactorTime, budget: float, expired: Callable[[], None]) -> None:
        self._clock = clock
        self._left = budget
        self._expired = expired
        self._call: IDelayedCall | None = None
        self._since = 0.0
        self.fired = False
        self._done = False

    def start(self) -> None:
        """
        Start or resume counting.
        """
        if self._call is None and not self._done:
            self._since = self._clock.seconds()
            self._call = self._clock.callLater(max(self._left, 0.0), self._fire)

    resume = start

    def pause(self) -> None:
        """
        Stop counting until :meth:`resume`.
        """
        if self._call is not None:
            self._call.cancel()
            self._call = None
            self._left -= self._clock.seconds() - self._since

    def stop(self) -> None:
        """
        The check ended: never fire.
        """
        self.pause()
        self._done = True

    def _fire(self) -> None:
        self._call = None
        self._done = True
        self.fired = True
        self._expired()


class StartPacer:
    """
    Spreads the starts of checks that fall due together over reactor turns,
    so that the reactor reads requests in between.

    Every host has its own schedule, but hosts whose checks fail at once
    stay in step: a thousand hosts refusing connections were all checked
    first in the same instant, fell due together every period, and the
    reactor ran a thousand starts in one turn (and their failures in the
    next) before it answered ``/live`` again.  A turn now runs starts for
    :data:`START_BUDGET` seconds at most, measured on the clock; the checks
    due beyond wait, in the order they fell due, for the next turns, each
    after the reactor has polled for I/O.  A few hosts never wait; the
    schedules then spread out, as each host's next check is due a period
    after its own start.

    :param clock: the reactor's time provider (a test clock, whose time
        stands still while the starts run, never defers one).
    :param budget: seconds of starts per turn.
    """

    def __init__(self, clock: IReactorTime, budget: float = START_BUDGET) -> None:
        self._clock = clock
        self._budget = budget
        self._waiting: deque[Callable[[], None]] = deque()
        #: when this turn's first start ran; ``None`` before it
        self._turn_began: float | None = None
        #: ends the turn: runs at the start of the next one
        self._next_turn: IDelayedCall | None = None

    @property
    def waiting(self) -> int:
        """
        Starts waiting for a later turn.
        """
        return len(self._waiting)

    def admit(self, start: Callable[[], None]) -> None:
        """
        Call ``start`` now, or in a later reactor turn if this turn's budget
        is spent or other starts wait already.
        """
        if not self._waiting and self._within_budget():
            start()
        else:
            self._waiting.append(start)

    def stop(self) -> None:
        """
        Drop the waiting starts (their monitors have stopped) and the turn.
        """
        self._waiting.clear()
        self._turn_began = None
        if self._next_turn is not None and self._next_turn.active():
            self._next_turn.cancel()
        self._next_turn = None

    def _within_budget(self) -> bool:
        now = self._clock.seconds()
        if self._turn_began is None:
            self._turn_began = now
            self._next_turn = self._clock.callLater(0, self._new_turn)
        return now - self._turn_began < self._budget

    def _new_turn(self) -> None:
        self._next_turn = None
        self._turn_began = None
        waiting = self._waiting
        while waiting and self._within_budget():
            waiting.popleft()()
