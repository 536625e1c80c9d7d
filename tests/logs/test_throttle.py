"""
Tests for :class:`pgstatus.logging.throttle.Throttle` on a ``Clock``.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from pgstatus.logging.throttle import Throttle


def test_one_line_per_interval_counting_what_it_held_back():
    clock = Clock()
    clock.advance(100)
    t = Throttle(clock, 10.0)
    assert t.due() == 1
    assert [t.due() for _ in range(4)] == [0, 0, 0, 0]
    clock.advance(9.9)
    assert t.due() == 0
    clock.advance(0.1)
    assert t.due() == 6
    assert t.due() == 0


def test_a_clock_that_steps_back_does_not_silence_it():
    clock = Clock()
    clock.advance(100)
    t = Throttle(clock, 10.0)
    assert t.due() == 1
    clock.rightNow = 50.0
    assert t.due() == 1


def test_without_a_clock_every_event_has_its_line():
    t = Throttle(None, 10.0)
    assert [t.due() for _ in range(3)] == [1, 1, 1]
