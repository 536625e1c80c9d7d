"""
Keeping a long-running service's memory in check: the objects start-up made
are frozen out of the garbage collector's work, and memory freed into the C
library's heap is handed back to the system.

Start-up (imports, building the service) allocates almost only objects that
live as long as the process; every full collection would traverse them all
again for nothing, so :func:`settle` moves them into the collector's
permanent generation once the service has started.

glibc's allocator keeps what Python (objects over 512 bytes: receive
buffers, request heads, rendered bodies) and libpq free inside its heap, and
gives the pages back only when the top of the heap is free, so a service
whose Python heap is flat still sees its RSS creep up.  :class:`HeapTrimmer`
calls ``malloc_trim(0)`` once a minute; where the C library has no such
function (musl, other systems) it does nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet.task import LoopingCall

#: seconds between two trims
INTERVAL = 60.0


def settle() -> None:
    """
    Move every object alive now into the collector's permanent generation
    (``gc.freeze``), so that later collections traverse only what the
    running service allocates.  Called once the service has started.
    """
    gc.freeze()


def libc_trim() -> Callable[[], object] | None:
    """
    ``malloc_trim(0)`` of the C library, or ``None`` where there is none.
    """
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (ImportError, OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class HeapTrimmer(Service):
    """
    Calls ``trim`` every ``interval`` seconds while running.

    :param clock: the reactor's time provider.
    :param trim: what to call; default :func:`libc_trim`'s (nothing when
        the C library has no ``malloc_trim``).
    :param interval: seconds between two calls.
    """

    def __init__(self, clock: Any, trim: Callable[[], object] | None = None,
                 interval: float = INTERVAL) -> None:
        self._trim = trim if trim is not None else libc_trim()
        self._interval = interval
        self._call: LoopingCall | None = None
        if self._trim is not None:
            self._call = LoopingCall(self._trim)
            self._call.clock = clock

    def startService(self) -> None:
        super().startService()
        if self._call is not None and not self._call.running:
            self._call.start(self._interval, now=False)

    def stopService(self) -> None:
        super().stopService()
        if self._call is not None and self._call.running:
            self._call.stop()
