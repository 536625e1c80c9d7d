"""
A check whose connection is refused leaves no reference cycle of pg-status's
own (issue 33, item 7).  With a thousand refused hosts, a thousand checks a
second each left ~40 objects for the garbage collector (the failure kept in
a local of the frame its traceback holds, and with it every frame down from
the reactor's poll; the TCP attempt, its connector and its Deferred), and
the collector's pauses held HTTP answers for up to 30 ms.  Twisted's own
client transport still leaves a small cycle per attempt (its ``doRead`` and
``doWrite`` are bound methods of itself); nothing else may.
"""

from __future__ import annotations

import gc
from collections import Counter

import pytest_twisted
from pgtopology import free_port

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.failures import CheckFailed
from pgstatus.monitor.probe import PostgresProbe
from pgstatus.monitor.turns import ConnectTurns, Deadline

CHECKS = 5


@pytest_twisted.inlineCallbacks
def test_a_refused_connection_leaves_no_cycle_of_ours(reactor):
    closed = free_port()  # bound once, released: nothing listens there
    config = load_config({"pg_status__hosts": "127.0.0.1", "pg_status__pg_port": str(closed)})
    probe = PostgresProbe(reactor, config.hosts[0], ConfigProvider(config),
                          ConnectTurns.for_hosts(reactor, config.sleep_ms, 1))
    failed: list[type] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(CHECKS):
            deadline = Deadline(reactor, 5.0, probe.abort)
            d = probe.check(reactor.seconds(), deadline)
            d.addErrback(lambda f: failed.append(f.type))
            yield d
            deadline.stop()
        gc.collect()
        garbage = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert failed == [CheckFailed] * CHECKS
    ours = {kind: garbage[kind] for kind in
            ("frame", "traceback", "CheckFailed", "Failure", "TCPAttempt", "Connector",
             "Deferred", "coroutine")}
    assert ours == dict.fromkeys(ours, 0), garbage
