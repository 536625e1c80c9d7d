"""
The monitor: one scheduler per host, all on the reactor thread.

A check of a host starts ``sleep_ms`` after the previous check of that host
started; checks of a host never overlap, an overrun is followed at once by
the next check, and missed periods are not made up.  Every check runs under
a :class:`~pgstatus.monitor.turns.Deadline` of ``query_timeout_ms`` whose expiry
aborts the probe (closing its connection).  A check due starts when the
shared :class:`~pgstatus.monitor.turns.StartPacer` lets it: at once, unless
many fell due in the same reactor turn.

Extra checks (fresh reads, a follower's request) only bring a host's next
check forward, under one cap whoever asks: see :meth:`HostMonitor.check_soon`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import Config
from pgstatus.model.stats import Histogram
from pgstatus.monitor import lag, values
from pgstatus.monitor.errorlog import PollErrorLimiter, poll_error_line
from pgstatus.monitor.failures import CheckFailed
from pgstatus.monitor.lag import MasterPosition, Observation
from pgstatus.monitor.registry import HostState, Registry
from pgstatus.monitor.turns import Deadline, StartPacer

log = Logger(namespace="pgstatus.monitor")

#: the longest period of a dead host that fails late, unless sleep_ms is longer
MAX_DEAD_PERIOD = 8.0


class Probe(Protocol):
    """
    What a monitor needs of a probe (see :class:`PostgresProbe`).
    """

    def check(self, started: float, deadline: Deadline) -> Deferred[Observation]: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class HostMonitor:
    """
    Checks one host on its own schedule and hands every result to the
    registry, which records and publishes it.

    :param state: the registry's handle for the host.
    :param registry: records and publishes every check's result.
    :param probe: runs a check.
    :param clock: time and timers.
    :param settings: the running configuration (periods, deadline).
    :param master_monitor: returns the monitor of the selected master, so a
        replica's check can wait for a master check in progress.
    :param pacer: shared by every host's monitor: a check due starts when
        the pacer lets it, at once unless many fell due in the same reactor
        turn; without one, at once.
    """

    def __init__(
        self,
        state: HostState,
        registry: Registry,
        probe: Probe,
        clock: IReactorTime,
        settings: ConfigProvider,
        master_monitor: Callable[[], HostMonitor | None] = lambda: None,
        pacer: StartPacer | None = None,
    ) -> None:
        self.state = state
        self._registry = registry
        self.probe = probe
        self._clock = clock
        self._settings = settings
        self._master_monitor = master_monitor
        self._pacer = pacer
        #: the check due waits for the pacer
        self._queued = False
        self._limiter = PollErrorLimiter(settings.current.poll_error_log_interval_ms)
        self._timer: IDelayedCall | None = None
        self._running = self.checking = False
        self._waiters: list[Callable[[], None]] = []
        self._late_failures = 0
        #: the check in progress has been recorded (as a success or failure)
        self._recorded = False
        #: the next check was brought forward by :meth:`check_soon`
        self._extra = False
        self.checks = 0
        #: checks brought forward by :meth:`check_soon`
        self.extra_checks = 0
        #: durations of completed checks (for /metrics)
        self.durations = Histogram()
        self.last_started: float | None = None
        #: when the running schedule's last check ended, failed or not (/metrics)
        self.last_completed: float | None = None

    @property
    def name(self) -> str:
        """
        The host name.
        """
        return self.state.host.name

    def start(self, delay: float = 0.0) -> None:
        """
        Start checking after ``delay`` seconds.
        """
        self._running = True
        if delay > 0:
            self._timer = self._clock.callLater(delay, self._due)
        else:
            self._due()

    def stop(self) -> None:
        """
        Stop checking (forgetting the last check's end) and close the connection.
        """
        self._running = self._extra = self._queued = False
        self.last_completed = None
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self.probe.close()

    def settings_changed(self, old: Config) -> None:
        """
        React to a reload (the provider already holds the new
        configuration; the probe reads it at its next check): a new error
        log interval, and a waiting next check rescheduled for a new ``sleep_ms``; a check in
        progress finishes as it started.
        """
        config = self._settings.current
        if config.poll_error_log_interval_ms != old.poll_error_log_interval_ms:
            self._limiter = PollErrorLimiter(config.poll_error_log_interval_ms)
        timer = self._timer
        if config.sleep_ms != old.sleep_ms and self._running and not self.checking \
                and not self._extra and timer is not None and timer.active():
            timer.cancel()
            now = self._clock.seconds()
            started = self.last_started if self.last_started is not None else now
            self._timer = self._clock.callLater(
                max(0.0, started + self._period() - now), self._due)

    def check_soon(self) -> bool:
        """
        An extra check, for whoever asks (fresh reads, a follower's
        request), under one cap per host: the next check is brought forward
        to now, but to no earlier than ``extra_check_interval_ms`` after the
        start of the previous one.  A request changes nothing while a check
        runs, while the next check is due by then anyway (brought forward
        already, or scheduled), or when the host is dead: a dead host gets
        its scheduled connection attempts only.  However many ask, a host
        thus gets at most one check per ``extra_check_interval_ms`` beyond
        its schedule, which then continues from that check.

        :return: whether the next check was brought forward.
        """
        timer = self._timer
        if not self._running or timer is None or not timer.active() \
                or self._registry.is_dead(self.state):
            return False
        now = self._clock.seconds()
        at = now
        if self.last_started is not None:
            gap = self._settings.current.extra_check_interval_ms / 1000
            at = max(now, self.last_started + gap)
        if timer.getTime() <= at:
            return False
        timer.cancel()
        self._extra = True
        if at > now:
            self._timer = self._clock.callLater(at - now, self._due)
        else:
            self._due()
        return True

    def on_check_done(self, callback: Callable[[], None]) -> None:
        """
        Call ``callback`` once, when the check in progress ends.
        """
        self._waiters.append(callback)

    def _period(self) -> float:
        sleep = self._settings.current.sleep_ms / 1000
        registry = self._registry
        if self._late_failures and registry.is_dead(self.state) \
                and registry.view.master is not None:
            return min(max(MAX_DEAD_PERIOD, sleep), sleep * 2 ** self._late_failures)
        return sleep

    def _due(self) -> None:
        """
        The next check is due: it starts when the pacer lets it.
        """
        self._timer = None
        if not self._running:
            return
        if self._pacer is None:
            self._run()
        else:
            self._queued = True
            self._pacer.admit(self._dequeued)

    def _dequeued(self) -> None:
        """
        The pacer's turn came: start, unless stopped meanwhile (and perhaps
        started again, so queued anew: that place starts nothing more).
        """
        if self._queued:
            self._queued = False
            self._run()

    def _run(self) -> None:
        if not self._running:
            return
        if self._extra:
            self._extra = False
            self.extra_checks += 1
        self.checking = True
        self._recorded = False
        self.checks += 1
        started = self.last_started = self._clock.seconds()
        budget = self._settings.current.query_timeout_ms / 1000
        deadline = Deadline(self._clock, budget, self.probe.abort)
        try:
            d = self.probe.check(started, deadline)
        except Exception:
            d = Deferred()
            d.errback(Failure())
        d.addBoth(self._checked, started, deadline)
        d.addErrback(self._internal_error, started)

    def _internal_error(self, f: Failure, started: float) -> None:
        """
        An exception in handling a check's result here (computing lags,
        recording, publishing).  Until the check is recorded, it makes the
        check a failed one, counted and logged as a failed query is (the
        ``validate_result`` poll-error line, under the host's rate limit);
        the traceback goes to debug.  After (a failure in what follows the
        recording), only a line under the same rate limit.  Either way the
        schedule goes on: the next check is due a period after this one
        started.
        """
        log.failure("internal error in check of host={host}", f, level=LogLevel.debug,
                    host=self.name)
        try:
            if self._running and not self._recorded:
                e = f.value
                why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
                self._record_failure(Failure(CheckFailed("validate_result", why)), False, started)
                return
        except Exception:
            f = Failure()
        finally:
            if self.checking:
                self._finish(started)
        if self._limiter.on_failure(self._clock.seconds()):
            log.failure("internal error in check of host={host}", f, level=LogLevel.error,
                        host=self.name)

    def _checked(self, result: Observation | Failure, started: float, deadline: Deadline) -> None:
        timed_out = deadline.fired
        deadline.stop()
        self.durations.observe(self._clock.seconds() - started)
        if not self._running:
            # stopped (shutdown, or the host left the configuration): the
            # aborted check says nothing about the host
            self._finish(started)
            return
        if isinstance(result, Failure):
            self._record_failure(result, timed_out, started)
            self._finish(started)
            return
        master_mon = self._master_monitor()
        if result.in_recovery and master_mon is not None and master_mon is not self \
                and master_mon.checking:
            self._wait_for_master(master_mon, result, started)
            return
        self._complete(result, started)

    def _complete(self, obs: Observation, started: float) -> None:
        """
        Record a successful probe's observation and end the check.  An
        exception on the way is a failed check (:meth:`_internal_error`),
        so whatever the probe returned, the check ends recorded: a host's
        first check always makes it checked, and readiness never waits on
        a check that raised.
        """
        try:
            self._record_success(obs)
        except Exception:
            self._internal_error(Failure(), started)
            return
        self._finish(started)

    def _wait_for_master(self, master_mon: HostMonitor, obs: Observation, started: float) -> None:
        """
        Use the result of the master's check in progress for the lag, but
        do not wait past this host's next check.
        """
        done = False

        def go() -> None:
            nonlocal done
            if done:
                return
            done = True
            if limit.active():
                limit.cancel()
            if self._running:
                self._complete(obs, started)
            else:
                self._finish(started)

        limit = self._clock.callLater(
            max(0.0, started + self._period() - self._clock.seconds()), go)
        master_mon.on_check_done(go)

    def _finish(self, started: float) -> None:
        self.checking = False
        if self._running:
            self.last_completed = self._clock.seconds()
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            w()
        if not self._running:
            return
        delay = max(0.0, started + self._period() - self._clock.seconds())
        self._timer = self._clock.callLater(delay, self._due)

    def _record_success(self, obs: Observation) -> None:
        """
        Compute the lags, check them (non-negative integers or unknown) and
        record the check as a success.  Raises, with nothing recorded, if
        any of that fails; the failure limit and back-off are reset only
        once the success is recorded.
        """
        st = self.state
        registry = self._registry
        was_failing = registry.failures(st)
        if obs.in_recovery:
            obs = lag.known_timeline(obs, st.timeline)
            current, check_ok, last = registry.lag_references(st)
            lms = values.lag("lag_ms", lag.lag_ms(obs, current, check_ok, obs.received))
            lb = values.lag("lag_bytes",
                            lag.lag_bytes(obs, current if current is not None else last))
            lsn = obs.replay_lsn
            through = None if lsn is None else obs.past_header(lsn)
            position = None
        else:
            lms, lb, lsn, through = 0, 0, obs.wal_lsn, None
            position = MasterPosition.from_observation(obs)
        registry.record_success(st, master=not obs.in_recovery, lsn=lsn, timeline=obs.timeline,
                                lag_ms=lms, lag_bytes=lb, position=position,
                                replayed_through=through)
        self._recorded = True
        self._late_failures = 0
        self._limiter.on_success()
        if was_failing:
            log.info("host poll recovered host={host} after_failures={n}",
                     host=self.name, n=was_failing)
        log.debug(
            "checked host={host} role={role} lsn={lsn} timeline={tl} lag_ms={lms} "
            "lag_bytes={lb} duration_ms={ms}",
            host=self.name, role="replica" if obs.in_recovery else "master",
            lsn=lsn, tl=obs.timeline, lms=lms, lb=lb,
            ms=round((obs.received - obs.started) * 1000),
        )

    def _record_failure(self, f: Failure, timed_out: bool, started: float) -> None:
        st = self.state
        registry = self._registry
        # logged before the failure is published (the original's order:
        # the poll error, then the state change), with the count it makes
        failures = registry.failures(st) + 1
        err = f.value
        # the original service's lines, all under one rate limit per host
        level = LogLevel.error if self._limiter.on_failure(self._clock.seconds()) \
            else LogLevel.debug
        fmt, fields = poll_error_line(err, timed_out, self.name,
                                      self._settings.current.query_timeout_ms)
        log.emit(level, fmt, failures=failures, **fields)
        self._recorded = True
        status = registry.record_failure(st)
        late = isinstance(err, CheckFailed) and err.late
        if late and not status.alive:
            self._late_failures += 1
        elif not late:
            self._late_failures = 0
