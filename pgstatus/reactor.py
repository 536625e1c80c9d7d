"""
The reactor pg-status runs on: Twisted's epoll reactor, except that events
of the descriptors whose classes it is given (the HTTP listener's port and
connections) are dispatched without the logging context Twisted sets up
around every event.

For each ready descriptor, Twisted's reactor calls ``log.callWithLogger``:
it asks the descriptor for its log prefix, copies the current context
dictionary with the prefix as ``system``, pushes it, runs the read or write
and pops it, a noticeable share of what a keep-alive request costs in all
(``bench/README.md``).  The context only gives the ``system`` field to events logged with
the legacy ``twisted.python.log`` during the callback; pg-status's log
lines do not show that field.  Everything else, and every other
descriptor's events, are dispatched exactly as Twisted does
(``_doReadOrWrite``, its error handling included).

:func:`install_default` installs it when ``twistd pgstatus`` or
``pg-status`` builds the service, unless a reactor is installed already
(``twistd --reactor``, a test runner): then that one is used.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterable

from twisted.internet import epollreactor
from twisted.python import log


class EPollReactor(epollreactor.EPollReactor):
    """
    :param bare: classes of descriptors whose events are dispatched
        without a logging context.
    """

    def __init__(self, bare: Iterable[type] = ()) -> None:
        super().__init__()
        self._bare = frozenset(bare)

    def doPoll(self, timeout: float | None) -> None:
        """
        Poll for events and dispatch them (``EPollReactor.doPoll``, with
        the bare dispatch).
        """
        if timeout is None:
            timeout = -1  # wait indefinitely
        try:
            events = self._poller.poll(timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        dispatch = self._doReadOrWrite
        selectables = self._selectables
        bare = self._bare
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            if selectable.__class__ in bare:
                try:
                    dispatch(selectable, fd, event)
                except KeyboardInterrupt:
                    raise
                except BaseException:
                    # as callWithLogger: log it and go on with the other events
                    log.err()
            else:
                log.callWithLogger(selectable, dispatch, selectable, fd, event)

    doIteration = doPoll


def install(bare: Iterable[type] = ()) -> EPollReactor:
    """
    Install :class:`EPollReactor` as the global reactor.
    """
    from twisted.internet.main import installReactor

    reactor = EPollReactor(bare)
    installReactor(reactor)
    return reactor


def install_default(bare: Iterable[type] = ()) -> None:
    """
    Install :class:`EPollReactor` unless a reactor is installed already.
    """
    if "twisted.internet.reactor" not in sys.modules:
        install(bare)
