"""
The process's signals, with one owner: this module is the only code of
pg-status that sets a signal handler.

=========  ==================================================================
signal     what it does
=========  ==================================================================
SIGTERM    logs ``received signal=SIGTERM`` and stops the reactor: exit
           status 0, as the original service exits.  With
           ``pg_status__shutdown_delay_ms``, the stop waits that long and
           the service keeps answering meanwhile (``/ready`` answers 503);
           another SIGTERM or a SIGINT then stops at once.
SIGINT     the same, never delayed.  An ignored SIGINT (``SIG_IGN``, as a
           shell leaves it for a background job) stays ignored.
SIGHUP     reopens the log output (log rotation), and with
           ``pg_status__env_file`` reloads the configuration.  With neither
           to do, it is left alone (a terminal's hang-up ends the process).
SIGUSR1    reopens the log output, when it is a file or syslog.
=========  ==================================================================

:class:`ProcessSignals` installs these handlers all at once, through the
reactor's public ``IReactorCore.callWhenRunning``: after the reactor's own
start-up, in which Twisted sets its SIGTERM and SIGINT handlers (that stop
the reactor, then make twistd end the process with the signal: exit status
143 or 130).  So ours win whatever else was set before, and nothing of
Twisted's is patched.  The handlers do no work themselves: a stop or a
reload is scheduled on the reactor thread (``callFromThread``); a reopen
only sets the observer's flag, which is safe in a handler.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from twisted.application.service import Service
from twisted.internet.error import ReactorNotRunning
from twisted.logger import Logger

log = Logger(namespace="pgstatus.main")

#: The signals that stop pg-status; the exit status is 0 after either.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The signals that reopen the log output.
REOPEN_SIGNALS = (signal.SIGHUP, signal.SIGUSR1)
#: Every signal this module may handle.
OWNED = STOP_SIGNALS + REOPEN_SIGNALS


def _nothing() -> None:
    pass


class ProcessSignals(Service):
    """
    The handlers of :data:`OWNED`, installed once the reactor runs
    (:meth:`startService`), or at once by :meth:`install`.  Once this
    service stops (the process is shutting down), SIGHUP no longer reloads;
    the handlers stay, so that a second SIGTERM during the shutdown meets
    neither Twisted's handler nor the default action, which would change
    the exit status.

    :param reactor: the reactor (``IReactorCore``, ``IReactorTime``,
        ``IReactorThreads``): it is stopped, and runs what a signal asks for.
    :param delay_ms: returns ``pg_status__shutdown_delay_ms`` in force when
        a SIGTERM comes (a reload may change it).
    :param drain: called when a delayed stop begins (the service's
        :meth:`~pgstatus.service.PgStatusService.drain`).
    :param reload: called on the reactor thread after a SIGHUP, while this
        service runs; ``None``: SIGHUP does not reload.
    :param reopen: called in the handler of SIGHUP and SIGUSR1 (it must only
        set a flag: the log observer's ``request_reopen``); ``None``: the
        log output is not reopened.
    """

    def __init__(self, reactor: Any, *, delay_ms: Callable[[], int] = lambda: 0,
                 drain: Callable[[], object] = _nothing,
                 reload: Callable[[], object] | None = None,
                 reopen: Callable[[], object] | None = None) -> None:
        self._reactor = reactor
        self._delay_ms = delay_ms
        self._drain = drain
        self._reload = reload
        self._reopen = reopen
        #: by signal: the handler installed, and the one it replaced
        self._installed: dict[int, Callable[[int, FrameType | None], None]] = {}
        self._previous: dict[int, Any] = {}
        #: the delayed stop, while it waits
        self._delayed: Any = None
        #: the reactor was told to stop
        self._stopping = False

    # -- installing ----------------------------------------------------------
    def startService(self) -> None:
        """
        Install the handlers once the reactor has started (at once if it
        runs already).
        """
        super().startService()
        self._reactor.callWhenRunning(self._install_if_running)

    def _install_if_running(self) -> None:
        if self.running:
            self.install()

    def handlers(self) -> dict[int, Callable[[int, FrameType | None], None]]:
        """
        The handler this owner sets for each signal it handles, installed or
        not: the stop signals always, SIGHUP when it reopens or reloads,
        SIGUSR1 when it reopens.
        """
        wanted: dict[int, Callable[[int, FrameType | None], None]] = {
            sig: self._on_stop for sig in STOP_SIGNALS}
        if self._reopen is not None or self._reload is not None:
            wanted[signal.SIGHUP] = self._on_hangup
        if self._reopen is not None:
            wanted[signal.SIGUSR1] = self._on_reopen
        return wanted

    def install(self) -> None:
        """
        Set the handlers of :meth:`handlers`, replacing whatever was set
        before, except a stop signal that is ignored (it stays ignored).
        Only the main thread may set signal handlers: elsewhere nothing is
        done.  Installing twice changes nothing.
        """
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self.handlers().items():
            before = signal.getsignal(sig)
            if sig in STOP_SIGNALS and before == signal.SIG_IGN:
                continue
            self._previous[sig] = before
            signal.signal(sig, handler)
            self._installed[sig] = handler

    def uninstall(self) -> None:
        """
        Put back the handlers :meth:`install` replaced, where ours are
        still installed (for tests that run the service in their process;
        a pg-status process keeps them to the end).
        """
        for sig, handler in self._installed.items():
            if signal.getsignal(sig) == handler:
                before = self._previous[sig]
                signal.signal(sig, before if before is not None else signal.SIG_DFL)
        self._installed.clear()
        self._previous.clear()

    # -- in the handlers: no work, only scheduling -------------------------------
    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self._reactor.callFromThread(self._stop_requested, signum)

    def _on_hangup(self, signum: int, frame: FrameType | None) -> None:
        if self._reopen is not None:
            self._reopen()
        if self._reload is not None:
            self._reactor.callFromThread(self._reload_requested)

    def _on_reopen(self, signum: int, frame: FrameType | None) -> None:
        if self._reopen is not None:
            self._reopen()

    # -- on the reactor thread ------------------------------------------------------
    def _reload_requested(self) -> None:
        if self.running and self._reload is not None:
            self._reload()

    def _stop_requested(self, signum: int) -> None:
        """
        A stop signal came: log it and stop the reactor, at once or, for a
        SIGTERM with a shutdown delay while the service runs, after the
        delay.  A stop signal during the delay stops at once; one during the
        shutdown only logs.
        """
        log.info("received signal={signal}", signal=_name(signum))
        if self._delayed is not None:
            self._delayed.cancel()
            self._delayed = None
        elif not self._stopping and self.running and signum == signal.SIGTERM:
            delay_ms = self._delay_ms()
            if delay_ms > 0:
                log.info("shutdown delayed delay_ms={delay_ms}: still answering, "
                         "/ready answers 503", delay_ms=delay_ms)
                self._drain()
                self._delayed = self._reactor.callLater(delay_ms / 1000, self._delay_over)
                return
        self._stop()

    def _delay_over(self) -> None:
        self._delayed = None
        self._stop()

    def _stop(self) -> None:
        self._stopping = True
        try:
            self._reactor.stop()
        except ReactorNotRunning:  # a second signal while shutting down
            pass


def _name(signum: int) -> str:
    """
    ``SIGTERM``, ``SIGINT``; the number for any other signal, as the
    original logs it.
    """
    return signal.Signals(signum).name if signum in STOP_SIGNALS else str(signum)
