"""
Checks that fail leave nothing behind, against a real PostgreSQL server
behind a proxy that makes the fault.

A check that misses its deadline is aborted by closing its connection;
txpostgres then fails the pending connect or query with Twisted's shared
``CONNECTION_DONE`` exception instance.  Raised inside the check's coroutine,
a shared instance collects the traceback of every aborted check, and with it
every frame, connection and Deferred of those checks: the service's memory
grew with each failing check of a hanging host (found by the soak's RSS
slope).  Here each fault runs for several checks, the service stops, and no
object of those checks may stay reachable.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
import pytest_twisted
from pgtopology import PgTopology

from pgstatus.monitor.libpq import Connection as _Connection
from pgstatus.monitor.turns import Deadline
from service import RunningService, wait_until

pytestmark = pytest.mark.pg

ENV = {
    "pg_status__sleep_ms": "100",
    "pg_status__query_timeout_ms": "100",
    "pg_status__max_fails": "1",
}
#: failing checks per fault; a leak keeps one check's objects per check
FAILING_CHECKS = 6


def live(kind: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is kind)


def single_host_env(topo: PgTopology, host: str, port: int) -> dict[str, str]:
    env = topo.hosts_env()
    env["pg_status__hosts"] = host
    env["pg_status__pg_port"] = str(port)
    return {**env, **ENV}


@pytest.mark.parametrize("fault", ["setup_hangs", "query_hangs", "closed_after_startup"])
@pytest_twisted.inlineCallbacks
def test_failed_checks_are_collected(pg_topology, tcp_proxy, reactor, fault):
    node = pg_topology.replicas[0]
    proxy = tcp_proxy(node)
    before = {kind: live(kind) for kind in (Deadline, _Connection)}
    svc = RunningService(reactor, single_host_env(pg_topology, proxy.host, proxy.port))
    try:
        mon = svc.monitor.monitors[0]
        if fault == "query_hangs":
            yield wait_until(reactor, lambda: svc.view.hosts[0].alive, 10, "host alive")
            yield proxy.hang()
        elif fault == "setup_hangs":
            yield proxy.hang()
        else:
            yield proxy.close_after_startup(drop_existing=True)
        yield wait_until(reactor, lambda: not svc.view.hosts[0].alive, 10, "host dead")
        start = mon.checks
        yield wait_until(reactor, lambda: mon.checks - start >= FAILING_CHECKS, 20,
                         f"{FAILING_CHECKS} failing checks")
        assert not svc.view.hosts[0].alive
        assert mon.probe.opened >= 1 if fault == "query_hangs" else mon.probe.opened == 0
    finally:
        yield svc.stop()

    def collected() -> Any:
        return all(live(kind) <= n for kind, n in before.items())

    yield wait_until(reactor, collected, 5,
                     "objects of the stopped service's checks to be collected")
