"""
The service end to end against real PostgreSQL servers: one primary and two
streaming replicas started from the local binaries (see conftest.py).

The service runs in this process on the reactor; blocking topology helpers
run in threads.  Every wait polls a condition with a deadline.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from pgtopology import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PLAIN_PASSWORD,
    PLAIN_USER,
    lsn_to_int,
)
from twisted.internet.task import deferLater

from service import blocking, ready, wait_until

pytestmark = pytest.mark.pg

FAST = {
    "pg_status__sleep_ms": "200",
    "pg_status__query_timeout_ms": "300",
    "pg_status__max_fails": "3",
}


def detection_bound(sleep_ms: int, timeout_ms: int, max_fails: int) -> float:
    """
    The spec's detection time, in seconds, plus one period of margin for
    scheduling on a busy machine.
    """
    s, t = sleep_ms / 1000, timeout_ms / 1000
    return s + t + (max_fails - 1) * max(s, t) + s + 0.5


@pytest_twisted.inlineCallbacks
def test_roles_and_api_shapes(pg_topology, service, reactor):
    """
    /master names the primary, /replica a replica, /hosts every host with
    its role; /ready turns 200 once every host was checked.
    """
    topo = pg_topology
    svc = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    r = yield svc.get("/ready")
    assert (r.code, r.text) == (200, "OK")
    r = yield svc.get("/master")
    assert (r.code, r.text) == (200, topo.primary.host)
    assert r.header("Content-Type") == "text/plain; charset=utf-8"
    replicas = {n.host for n in topo.replicas}
    seen = set()
    for _ in range(4):
        r = yield svc.get("/replica")
        assert r.code == 200
        seen.add(r.text)
    assert seen == replicas, "round-robin over both replicas"
    r = yield svc.get("/hosts")
    hosts = r.json()
    assert [h["host"] for h in hosts] == [n.host for n in topo.nodes]
    assert hosts[0]["master"] is True and hosts[0]["lag_ms"] == 0 and hosts[0]["lag_bytes"] == 0
    for h in hosts:
        assert h["alive"] is True and h["possible_dead"] is False
        assert list(h) == ["host", "dc", "geo", "master", "alive", "possible_dead", "lag_ms",
                           "sync_by_time", "lag_bytes", "sync_by_bytes", "lsn"]
    r = yield svc.get("/master", json_=True)
    assert r.json() == {"host": topo.primary.host, "dc": None, "geo": None}


@pytest_twisted.inlineCallbacks
def test_paused_replay_lag_bytes_and_read_your_writes(guarded_topology, service, reactor):
    """
    With replay paused on one replica, its lag_bytes grows by what the
    primary writes; /sync_by_bytes?lag_bytes=0 and a fresh min_lsn exclude
    it; after resume it catches up and lag_bytes returns to 0.
    """
    topo = guarded_topology
    paused, other = topo.replicas
    svc = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield blocking(paused.pause_replay)
    before = svc.host(paused.host).lsn
    lsn, tl, row = yield blocking(topo.write, "x" * 20000)
    target = lsn_to_int(lsn)

    def grown():
        h = svc.host(paused.host)
        return h.lag_bytes is not None and h.lag_bytes >= target - before - 64 and h

    (h, _) = yield wait_until(reactor, grown, 5, "lag_bytes of the paused replica to grow")
    assert h.lsn == before
    yield wait_until(reactor, lambda: (svc.host(other.host).lsn or 0) >= target, 5,
                     "the other replica to replay the write")
    for _ in range(6):
        r = yield svc.get("/sync_by_bytes?lag_bytes=0")
        assert r.text == other.host
        r = yield svc.get(f"/replica?min_lsn={lsn}&timeline={tl}")
        assert r.text == other.host
        assert (yield blocking(topo.has_row, other, row))
    # Only the paused replica is left: min_lsn falls back to the master.
    yield blocking(other.pause_replay)
    lsn2, tl2, row2 = yield blocking(topo.write)
    for _ in range(3):
        r = yield svc.get(f"/replica?min_lsn={lsn2}&timeline={tl2}")
        assert r.text == topo.primary.host
    yield blocking(other.resume_replay)
    yield blocking(paused.resume_replay)

    def caught_up():
        return all(
            svc.host(n.host).lag_bytes == 0 and (svc.host(n.host).lsn or 0) >= lsn_to_int(lsn2)
            for n in topo.replicas
        )

    yield wait_until(reactor, caught_up, 10, "both replicas to catch up")
    r = yield svc.get(f"/replica?min_lsn={lsn2}&timeline={tl2}")
    assert r.text in {n.host for n in topo.replicas}
    node = next(n for n in topo.replicas if n.host == r.text)
    assert (yield blocking(topo.has_row, node, row2))


@pytest_twisted.inlineCallbacks
def test_idle_master_lag_ms_below_sleep_ms(pg_topology, service, reactor):
    """
    On a master without writes, a caught-up replica's lag_ms stays below
    sleep_ms (the bound by the master's last check), although its last
    replayed commit gets older.
    """
    topo = pg_topology
    svc = service({**topo.hosts_env(), "pg_status__sleep_ms": "300",
                   "pg_status__query_timeout_ms": "300"})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield wait_until(reactor, lambda: all(svc.host(n.host).lag_bytes == 0 for n in topo.replicas),
                     5, "replicas caught up")
    # the bound holds "while checks run on schedule": the first rounds are
    # spaced by connection turns (and, on a loaded machine, late), so wait
    # for the first round under it; the commits keep ageing meanwhile, so
    # without the bound this wait already fails
    yield wait_until(reactor, lambda: all((svc.host(n.host).lag_ms or 0) < 300
                                          and svc.host(n.host).lag_ms is not None
                                          for n in topo.replicas),
                     5, "a round of checks on schedule")
    samples = []
    start = reactor.seconds()
    while reactor.seconds() - start < 2.0:
        for n in topo.replicas:
            samples.append(svc.host(n.host).lag_ms)
        yield deferLater(reactor, 0.1, lambda: None)
    assert samples and all(s is not None and s < 300 for s in samples), samples


@pytest_twisted.inlineCallbacks
def test_killed_replica_possibly_dead_then_dead_within_bound(guarded_topology, service, reactor):
    """
    A stopped replica becomes possibly dead, then dead within the spec's
    detection bound; it is never returned once dead; it recovers after a
    restart.
    """
    topo = guarded_topology
    victim = topo.replicas[0]
    svc = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield blocking(victim.kill)
    t0 = reactor.seconds()
    yield wait_until(reactor, lambda: svc.host(victim.host).possible_dead, 3, "possibly dead")
    h = svc.host(victim.host)
    if h.alive:
        assert h.lsn is not None, "a possibly dead host keeps its last values"
    yield wait_until(reactor, lambda: not svc.host(victim.host).alive, 5, "dead")
    took = reactor.seconds() - t0
    assert took <= detection_bound(200, 300, 3), took
    h = svc.host(victim.host)
    assert h.lsn is None and h.lag_ms is None and h.lag_bytes is None
    for _ in range(6):
        r = yield svc.get("/replica")
        assert r.text == topo.replicas[1].host
    r = yield svc.get("/hosts")
    dead = next(x for x in r.json() if x["host"] == victim.host)
    assert dead["alive"] is False and dead["possible_dead"] is True
    assert dead["sync_by_time"] is False and dead["lsn"] is None
    yield blocking(topo.restore)
    yield wait_until(reactor, lambda: svc.host(victim.host).healthy, 10, "recovery")


@pytest_twisted.inlineCallbacks
def test_frozen_host_times_out_without_delaying_others(guarded_topology, service, reactor):
    """
    A SIGSTOPped replica's checks time out at query_timeout_ms while the
    other hosts keep being checked on schedule.
    """
    topo = guarded_topology
    victim = topo.replicas[0]
    svc = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield blocking(victim.sigstop)
    others = [m for m in svc.monitor.monitors if m.name != victim.host]
    yield wait_until(reactor, lambda: not svc.host(victim.host).alive, 5, "frozen host dead")
    t0 = reactor.seconds()
    counts = [m.checks for m in others]
    yield deferLater(reactor, 1.0, lambda: None)
    elapsed = reactor.seconds() - t0
    for m, c in zip(others, counts, strict=True):
        # one check every 200 ms: at least 3 in a second, even on a slow machine
        assert m.checks - c >= 3, (m.name, m.checks - c, elapsed)
        assert svc.host(m.name).healthy
    yield blocking(victim.sigcont)
    yield wait_until(reactor, lambda: svc.host(victim.host).healthy, 10, "recovery after SIGCONT")


@pytest_twisted.inlineCallbacks
def test_connection_reused_and_recycled(pg_topology, service, reactor):
    """
    One backend serves consecutive checks; after conn_max_age_ms it is
    replaced.
    """
    topo = pg_topology
    svc = service({**topo.hosts_env(), "pg_status__sleep_ms": "100",
                   "pg_status__conn_max_age_ms": "1500"})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    mon = svc.monitor.monitors[0]
    pid = mon.probe.backend_pid
    assert pid is not None
    checks = mon.checks
    yield wait_until(reactor, lambda: mon.checks >= checks + 5, 5, "five more checks")
    assert mon.probe.backend_pid == pid
    pids = yield blocking(topo.primary.backend_pids, application_name="pg-status")
    assert pids.count(pid) == 1
    yield wait_until(reactor, lambda: mon.probe.backend_pid not in (None, pid), 5,
                     "the aged connection to be replaced")


@pytest.mark.parametrize("user,password", [(MONITOR_USER, MONITOR_PASSWORD),
                                           (PLAIN_USER, PLAIN_PASSWORD)])
@pytest_twisted.inlineCallbacks
def test_unprivileged_roles_poll(pg_topology, service, reactor, user, password):
    """
    A role with pg_monitor and one without any grant both get roles and
    lags; the unprivileged one takes replica timelines from the control file.
    """
    topo = pg_topology
    svc = service({**topo.hosts_env(user=user, password=password), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield wait_until(reactor, lambda: all(h.alive for h in svc.view.hosts), 5, "all alive")
    assert svc.view.master.name == topo.primary.host
    for n in topo.replicas:
        h = svc.host(n.host)
        assert h.timeline == 1 and h.lag_bytes is not None


@pytest_twisted.inlineCallbacks
def test_revoked_control_functions_fall_back(fresh_topology, service, reactor):
    """
    With EXECUTE on pg_control_checkpoint() and SELECT on
    pg_stat_wal_receiver revoked, the status query falls back step by step
    and keeps polling; replica timelines become unknown.
    """
    topo = yield blocking(fresh_topology, 1)
    yield blocking(topo.primary.sql,
                   "REVOKE EXECUTE ON FUNCTION pg_control_checkpoint() FROM PUBLIC")
    yield blocking(topo.primary.sql, "REVOKE SELECT ON pg_stat_wal_receiver FROM PUBLIC")
    lsn, _, _ = yield blocking(topo.write)
    yield blocking(topo.wait_replicated, lsn)
    svc = service({**topo.hosts_env(user=PLAIN_USER, password=PLAIN_PASSWORD), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    replica = topo.replicas[0]
    yield wait_until(reactor, lambda: svc.host(replica.host).alive
                     and not svc.host(replica.host).possible_dead, 5, "replica alive")
    h = svc.host(replica.host)
    assert h.timeline is None and h.lsn is not None
    assert svc.monitor.monitors[1].probe._level == 2


@pytest_twisted.inlineCallbacks
def test_promotion_new_master_new_timeline(fresh_topology, service, reactor):
    """
    The master stops and a replica is promoted: the new master is selected
    on timeline 2; a replica left on the old timeline has unknown
    lag_bytes and never meets min_lsn.
    """
    topo = yield blocking(fresh_topology, 2)
    old, (new, left) = topo.primary, topo.replicas
    svc = service({**topo.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield blocking(old.stop, "fast")
    yield blocking(new.promote)
    t0 = reactor.seconds()
    yield wait_until(reactor, lambda: svc.view.master is not None
                     and svc.view.master.name == new.host, 5, "the promoted master")
    assert reactor.seconds() - t0 <= detection_bound(200, 300, 3)
    yield wait_until(reactor, lambda: svc.host(new.host).timeline == 2, 5, "timeline 2")
    # 'left' still follows the stopped old master: its timeline stays 1
    # A check of it after the new master was selected gives unknown lag_bytes.
    yield wait_until(reactor, lambda: svc.host(left.host).alive
                     and svc.host(left.host).timeline == 1
                     and svc.host(left.host).lag_bytes is None, 5, "old-timeline replica")
    lsn, tl, row = yield blocking(topo.write, None, new)
    assert tl == 2
    for _ in range(4):
        r = yield svc.get(f"/replica?min_lsn={lsn}&timeline={tl}")
        assert r.text == new.host
        r = yield svc.get(f"/replica?min_lsn={lsn}")
        assert r.text == new.host
    r = yield svc.get("/master")
    assert r.text == new.host


@pytest_twisted.inlineCallbacks
def test_locality_direct_and_env_indirection(pg_topology, service, reactor, monkeypatch):
    """
    /replica prefers the replica in the current DC; with geo given through
    current_geo_env, the replica in the same geo; /most_sync_by_bytes
    ignores locality.
    """
    topo = pg_topology
    p, r1, r2 = topo.nodes
    env = {**topo.hosts_env(), **FAST,
           "pg_status__hosts_dc": "dc-a,dc-b,dc-c", "pg_status__current_dc": "dc-c"}
    svc = service(env)
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield wait_until(reactor, lambda: all(h.healthy for h in svc.view.hosts), 5, "healthy")
    for _ in range(4):
        r = yield svc.get("/replica")
        assert r.text == r2.host
    r = yield svc.get("/replica", json_=True)
    assert r.json() == {"host": r2.host, "dc": "dc-c", "geo": None}
    env = {**topo.hosts_env(), **FAST,
           "pg_status__hosts_geo": "eu,us,eu", "pg_status__current_geo_env": "MY_GEO",
           "MY_GEO": "us"}
    svc2 = service(env)
    yield wait_until(reactor, ready(svc2), 10, "readiness")
    yield wait_until(reactor, lambda: all(h.healthy for h in svc2.view.hosts), 5, "healthy")
    for _ in range(4):
        r = yield svc2.get("/sync_by_time_or_bytes")
        assert r.text == r1.host


@pytest_twisted.inlineCallbacks
def test_not_ready_answers_503_before_validation(pg_topology, service, reactor, tcp_proxy):
    """
    While a host's first check hangs, /ready and every host endpoint answer
    503 pg_monitor is not ready, even with invalid parameters; /live and
    /version answer at once.
    """
    topo = pg_topology
    proxy = tcp_proxy(topo.replicas[0])
    proxy.hang()
    nodes_env = topo.hosts_env()
    ports = nodes_env["pg_status__pg_port"].split(",")
    hosts = nodes_env["pg_status__hosts"].split(",")
    hosts[1], ports[1] = proxy.host if hasattr(proxy, "host") else "127.0.0.1", str(proxy.port)
    svc = service({**nodes_env, "pg_status__hosts": ",".join(hosts),
                   "pg_status__pg_port": ",".join(ports),
                   "pg_status__sleep_ms": "1000", "pg_status__query_timeout_ms": "3000"})
    r = yield svc.get("/live")
    assert (r.code, r.text) == (200, "OK")
    r = yield svc.get("/version")
    from pgstatus import __version__
    assert (r.code, r.text) == (200, __version__)
    for path in ["/ready", "/master", "/replica?lag_ms=-1", "/sync_by_time?lag_ms=x",
                 "/hosts", "/status", "/status?host=nope", "/most_sync_by_bytes?min_lsn=zz"]:
        for as_json in (False, True):
            r = yield svc.get(path, json_=as_json)
            assert r.code == 503, path
            assert r.json() == {"error_text": "pg_monitor is not ready"}, path
            assert r.header("Content-Type") == "application/json"
    assert not svc.view.ready
    yield wait_until(reactor, ready(svc), 10, "readiness after the first check times out")
    r = yield svc.get("/ready")
    assert r.code == 200


@pytest_twisted.inlineCallbacks
def test_host_name_resolved_off_the_reactor(pg_topology, service, reactor):
    """
    A host given by name ("localhost") is resolved through the reactor's
    resolver and reached at its address; an unresolvable name fails its
    checks without holding up the others.
    """
    topo = pg_topology
    env = topo.hosts_env()
    env["pg_status__hosts"] = "localhost," + env["pg_status__hosts"].split(",", 1)[1] + \
        ",no-such-host.invalid"
    env["pg_status__pg_port"] += "," + str(topo.primary.port)
    svc = service({**env, **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    yield wait_until(reactor, lambda: svc.host("localhost").healthy, 5, "localhost healthy")
    assert svc.view.master.name == "localhost"
    assert not svc.host("no-such-host.invalid").alive
    r = yield svc.get("/master")
    assert r.text == "localhost"
