"""
:mod:`pgstatus.memory`: start-up frozen out of the collector, the heap
trimmer.
"""

from __future__ import annotations

from test_launch import run_python
from twisted.internet.task import Clock

from pgstatus.memory import INTERVAL, HeapTrimmer, libc_trim


def test_settle_freezes_and_leaves_the_collector_as_it_was() -> None:
    """
    In a fresh interpreter (the collector is process-wide): what is alive
    is frozen, and the collector stays on, or off if it was off.
    """
    out = run_python(
        "import gc\n"
        "from pgstatus.memory import settle\n"
        "import twisted.internet.defer\n"
        "settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 1000)\n"
        "gc.disable()\n"
        "settle()\n"
        "print(gc.isenabled())\n")
    assert out.splitlines() == ["True True", "False"]


def test_trims_once_per_interval_while_running() -> None:
    clock = Clock()
    calls = []
    t = HeapTrimmer(clock, lambda: calls.append(clock.seconds()))
    clock.advance(INTERVAL * 2)
    assert calls == []                       # not before it starts
    t.startService()
    clock.advance(INTERVAL - 1)
    assert calls == []                       # not at once
    clock.advance(1)
    clock.advance(INTERVAL)
    assert len(calls) == 2
    t.stopService()
    clock.advance(INTERVAL * 3)
    assert len(calls) == 2
    assert clock.getDelayedCalls() == []


def test_libc_trim_runs_here() -> None:
    """This machine's C library (glibc) has malloc_trim; it returns 0 or 1."""
    trim = libc_trim()
    assert trim is not None
    assert trim() in (0, 1)
