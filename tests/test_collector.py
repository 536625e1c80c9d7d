"""
:mod:`pgstatus.collector`: collections held while starting, start-up frozen
after.  Each case runs in a fresh interpreter: the collector is process-wide.
"""

from __future__ import annotations

from test_launch import run_python


def test_hold_then_settle() -> None:
    out = run_python(
        "import gc\n"
        "from pgstatus.collector import hold_collections, settle\n"
        "hold_collections()\n"
        "held = gc.isenabled()\n"
        "import twisted.internet.defer\n"
        "settle()\n"
        "print(held, gc.isenabled(), gc.get_freeze_count() > 1000)\n")
    assert out == "False True True"


def test_a_collector_turned_off_before_stays_off() -> None:
    out = run_python(
        "import gc\n"
        "from pgstatus.collector import hold_collections, settle\n"
        "gc.disable()\n"
        "hold_collections()\n"
        "settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n")
    assert out == "False True"


def test_settle_alone_freezes_and_leaves_the_collector_on() -> None:
    out = run_python(
        "import gc\n"
        "from pgstatus.collector import settle\n"
        "settle()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n")
    assert out == "True True"
