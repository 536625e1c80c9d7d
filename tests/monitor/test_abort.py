"""
Aborting a check while it waits (deadline, stop, host removed): the wait
ends, and the abort itself never raises.  Pure logic on a
:class:`~twisted.internet.task.Clock`; the real faults that lead here are in
``test_faults.py`` and ``test_leaks.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred
from twisted.internet.task import Clock

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.probe import ABORT_GRACE, PostgresProbe
from pgstatus.monitor.turns import ConnectTurns


def waiting_probe(pending: Deferred[Any]) -> tuple[PostgresProbe, Clock, list[Any]]:
    """A probe whose check waits for ``pending``; what the wait ended with."""
    clock = Clock()
    config = load_config({"pg_status__hosts": "127.0.0.1"})
    probe = PostgresProbe(clock, config.hosts[0], ConfigProvider(config),
                          ConnectTurns.for_hosts(clock, config.sleep_ms, 1))
    ended: list[Any] = []
    ensureDeferred(probe._wait(pending)).addBoth(ended.append)
    return probe, clock, ended


def refusing_canceller(d: Deferred[Any]) -> None:
    # as txpostgres's canceller on a closed connection
    raise RuntimeError("connection already closed")


def test_a_wait_that_can_be_cancelled_ends_at_once() -> None:
    probe, clock, ended = waiting_probe(Deferred())
    probe.abort()
    assert len(ended) == 1 and ended[0].check(CancelledError)


def test_a_canceller_that_raises_neither_escapes_nor_leaves_the_wait_hanging() -> None:
    probe, clock, ended = waiting_probe(Deferred(refusing_canceller))
    probe.abort()  # does not raise
    assert ended == []
    clock.advance(ABORT_GRACE)
    assert len(ended) == 1 and "aborted" in str(ended[0].value)


def test_txpostgres_own_failure_first_is_not_doubled() -> None:
    """
    txpostgres fails the wait at its next reactor turn (``callLater(0)``,
    scheduled before the abort): the probe's own failure then does nothing.
    """
    pending: Deferred[Any] = Deferred(refusing_canceller)
    probe, clock, ended = waiting_probe(pending)
    clock.callLater(0, pending.errback, ValueError("server closed the connection"))
    probe.abort()
    clock.advance(0)
    assert len(ended) == 1 and ended[0].check(ValueError)
    clock.advance(ABORT_GRACE)  # no AlreadyCalledError
    assert len(ended) == 1


@pytest.mark.parametrize("twice", [False, True])
def test_abort_without_a_wait(twice: bool) -> None:
    clock = Clock()
    config = load_config({"pg_status__hosts": "127.0.0.1"})
    probe = PostgresProbe(clock, config.hosts[0], ConfigProvider(config),
                          ConnectTurns.for_hosts(clock, config.sleep_ms, 1))
    probe.abort()
    if twice:
        probe.abort()
    assert clock.getDelayedCalls() == []
