"""
SIGTERM and SIGINT: a clean stop with exit status 0, as the original
service exits, and one log line naming the signal.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from twisted.internet.error import ReactorNotRunning
from twisted.logger import Logger

log = Logger(namespace="pgstatus.main")


#: The signals that stop pg-status; the exit status is 0 after either.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install_stop_signals(reactor: Any) -> Callable[[], None] | None:
    """
    Make SIGTERM and SIGINT log ``received signal=SIGTERM`` (or ``SIGINT``)
    and stop the reactor, on the reactor thread.

    These replace Twisted's own handlers, which also stop the reactor but
    make twistd kill itself with the signal afterwards (exit status 143 or
    130); the original service exits with status 0 after a clean shutdown,
    and so does pg-status.  A signal that is ignored (``SIG_IGN``, e.g.
    SIGINT in a background job) stays ignored.  Only the main thread may set
    signal handlers; elsewhere nothing is installed.

    :return: a function that puts the previous handlers back (where ours
        are still installed), or ``None`` if nothing was installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int) -> None:
        log.info("received signal={signal}", signal=signal.Signals(signum).name)
        try:
            reactor.stop()
        except ReactorNotRunning:  # a second signal while shutting down
            pass

    def handler(signum: int, frame: FrameType | None) -> None:
        reactor.callFromThread(stop, signum)

    previous: dict[int, Any] = {}
    for sig in STOP_SIGNALS:
        before = signal.getsignal(sig)
        if before == signal.SIG_IGN:
            continue
        previous[sig] = before
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, before if before is not None else signal.SIG_DFL)

    return restore
