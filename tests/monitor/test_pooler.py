"""
pg-status behind PgBouncer (``pool_mode = transaction``), end to end: real
poolers (``tests/pgbouncer.py``) in front of the real topology, the real
service in this process.

Each node gets its own pooler on the node's loopback address (another,
free port), so host names stay distinct.  pg-status logs in through the
poolers as the monitoring role; the tests read the pooler's admin console
(``SHOW STATS/POOLS/CLIENTS/SERVERS``), its log, and ``pg_stat_activity``
on the servers.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_twisted
from invariants import ViewLog, detection_allowance, status
from pgbouncer import BASE_SETTINGS, PgBouncer
from pgtopology import MONITOR_PASSWORD, MONITOR_USER, PgNode, PgTopology, lsn_to_int
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.failures import CheckFailed
from pgstatus.monitor.probe import PostgresProbe
from pgstatus.monitor.scheduler import MAX_DEAD_PERIOD
from pgstatus.monitor.turns import ConnectTurns, Deadline
from service import RunningService, blocking, wait_until

pytestmark = pytest.mark.pg

FAST = {
    "pg_status__sleep_ms": "200",
    "pg_status__query_timeout_ms": "300",
    "pg_status__max_fails": "3",
}
#: the spec's defaults, spelled out: the back-off is 2, 4, then 8 s with them
DEFAULTS = {
    "pg_status__sleep_ms": "1000",
    "pg_status__query_timeout_ms": "1000",
    "pg_status__max_fails": "3",
}
#: a pooler that retries a failed server login after 1 s (default 15 s)
POOLER = {"server_login_retry": "1"}
#: a pooler that resets every server connection after every transaction
#: and checks it before every reuse
RESET_AND_CHECK = {
    **POOLER,
    "server_reset_query": "DISCARD ALL",
    "server_reset_query_always": "1",
    "server_check_query": "SELECT 1",
    "server_check_delay": "0",
}


def pooled_env(topo: PgTopology, bouncers: list[PgBouncer]) -> dict[str, str]:
    """Service environment: every node through its pooler, as the monitoring role."""
    env = topo.hosts_env(user=MONITOR_USER, password=MONITOR_PASSWORD)
    env["pg_status__hosts"] = ",".join(b.host for b in bouncers)
    env["pg_status__pg_port"] = ",".join(str(b.port) for b in bouncers)
    return env


@inlineCallbacks
def poolers(pgbouncer: Any, nodes: list[PgNode], extra: dict[str, str]) -> Any:
    """One started pooler per node, in node order."""
    out = []
    for n in nodes:
        b = yield blocking(pgbouncer, n, extra)
        out.append(b)
    return out


def healthy(svc: RunningService, *names: str) -> Any:
    """A predicate for ``wait_until``: ready, and every named host healthy."""
    return lambda: svc.view.ready and all(svc.host(n).healthy for n in names)


def failures(events: list[dict]) -> list[str]:
    """The poll failure records among log events."""
    from pgstatus.logging.formats import format_text

    return [format_text(e) for e in events
            if "PostgreSQL" in (e.get("log_format") or "")
            and ("failed" in e["log_format"] or "timed out" in e["log_format"])]


_LOGIN = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC .*login attempt: "
                    r"db=postgres user=(\S+)", re.M)


def login_times(bouncer: PgBouncer, user: str = MONITOR_USER) -> list[float]:
    """When ``user`` logged into the pooler (its log; POSIX seconds)."""
    return [datetime.strptime(ts, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
            .timestamp() for ts, who in _LOGIN.findall(bouncer.log_text()) if who == user]


# --------------------------------------------------------------------------
# 1. checks through transaction pooling


@pytest.mark.parametrize("settings", ["defaults", "reset_and_check"])
@pytest_twisted.inlineCallbacks
def test_checks_through_transaction_poolers(pg_topology, pgbouncer, service, log_events,
                                            reactor, settings):
    """
    Two pg-status instances check every node through its pooler, whose one
    server connection (default_pool_size = 1, max_client_conn = 10) they
    share transaction by transaction; a third checks directly.  Through the
    poolers, roles, lsn, timelines and lags are those seen directly, and
    /master, /replica and /replica?min_lsn answer the same.  Then, over 20
    more checks per host, no check fails: each instance keeps the one client
    connection it opened per pooler, every check is a transaction on the
    pooler, and each server has one backend of the monitoring role for both
    instances.  With ``reset_and_check``, the pooler runs DISCARD ALL after
    every transaction and ``SELECT 1`` before every reuse: the checks keep
    no session state and no named prepared statements.
    """
    topo = pg_topology
    extra = RESET_AND_CHECK if settings == "reset_and_check" else POOLER
    bouncers = yield poolers(pgbouncer, topo.nodes, extra)
    conf = {r["key"]: r["value"] for r in (yield blocking(bouncers[0].show, "CONFIG"))}
    for key in ("pool_mode", "default_pool_size", *extra):
        assert conf[key] == {**BASE_SETTINGS, **extra}[key], (key, conf[key])
    names = [n.host for n in topo.nodes]
    env = {**pooled_env(topo, bouncers), **FAST}
    pooled = [service(env), service(env)]
    direct = service({**topo.hosts_env(), **FAST})
    for svc in (*pooled, direct):
        yield wait_until(reactor, healthy(svc, *names), 10, "all healthy")

    lsn, timeline, _row = yield blocking(topo.write, "through the pooler")
    yield blocking(topo.wait_replicated, lsn)

    def same_as_direct() -> bool:
        want = {h.name: (h.master, h.alive, h.lsn, h.timeline, h.lag_bytes)
                for h in direct.view.hosts}
        return all(
            {h.name: (h.master, h.alive, h.lsn, h.timeline, h.lag_bytes)
             for h in svc.view.hosts} == want
            and all(h.lsn is not None and h.lsn >= lsn_to_int(lsn) for h in svc.view.hosts)
            for svc in pooled)

    yield wait_until(reactor, same_as_direct, 5, "the pooled views to match the direct one")
    for svc in (*pooled, direct):
        hosts = (yield svc.get("/hosts")).json()
        assert [h["master"] for h in hosts] == [True, False, False]
        for h in hosts[1:]:
            assert h["lag_ms"] is not None and h["lag_bytes"] == 0 and h["sync_by_bytes"]
        r = yield svc.get("/master")
        assert r.text == topo.primary.host
        seen = set()
        for _ in range(4):
            seen.add((yield svc.get("/replica")).text)
        assert seen == {n.host for n in topo.replicas}
        r = yield svc.get(f"/replica?min_lsn={lsn}&timeline={timeline}")
        assert r.code == 200 and r.text in seen

    # 20 more checks per host, all through the pooler connections
    marks = [b.log_size() for b in bouncers]
    stats0 = yield blocking(lambda: [b.stats() for b in bouncers])
    checks0 = [[m.checks for m in svc.monitor.monitors] for svc in pooled]
    # the check counts are taken in the same reactor turn that finds none
    # running: every check they count has sent its query before stats1 is
    # read (checks started later only add pooler transactions)
    checks1: list[list[int]] = []

    def settled() -> bool:
        if not all(m.checks >= c + 20 and not m.checking
                   for svc, cs in zip(pooled, checks0, strict=True)
                   for m, c in zip(svc.monitor.monitors, cs, strict=True)):
            return False
        checks1[:] = [[m.checks for m in svc.monitor.monitors] for svc in pooled]
        return True

    yield wait_until(reactor, settled, 15, "20 more checks")
    stats1 = yield blocking(lambda: [b.stats() for b in bouncers])
    assert failures(log_events) == []
    for svc in pooled:
        assert [m.probe.opened for m in svc.monitor.monitors] == [1, 1, 1]
        assert all(h.healthy for h in svc.view.hosts)
    for i, (b, node) in enumerate(zip(bouncers, topo.nodes, strict=True)):
        checks = sum(c1[i] - c0[i] for c0, c1 in zip(checks0, checks1, strict=True))
        xacts = stats1[i]["total_xact_count"] - stats0[i]["total_xact_count"]
        assert xacts >= checks, (node.name, xacts, checks)
        clients = yield blocking(b.clients, "pg-status")
        assert len(clients) == 2, clients
        pool = yield blocking(b.pool, MONITOR_USER)
        assert pool["pool_mode"] == "transaction"
        assert pool["sv_active"] + pool["sv_idle"] + pool["sv_used"] + pool["sv_tested"] <= 1
        # (polled: a backend of an earlier test may still be exiting)
        yield wait_until(reactor, lambda node=node: blocking(node.connections, MONITOR_USER)
                         .addCallback(lambda n: n == 1), 5,
                         f"one backend of {MONITOR_USER} on {node.name}")
        log = b.log_text(marks[i])
        assert "pooler error" not in log and "ERROR" not in log, log[-2000:]
    xacts = [int(s1["total_xact_count"] - s0["total_xact_count"])
             for s0, s1 in zip(stats0, stats1, strict=True)]
    print(f"[pooler] {settings}: pooler transactions while each instance ran 20 checks "
          f"per host: {xacts}")


# --------------------------------------------------------------------------
# 2. PostgreSQL down behind a live pooler


@pytest_twisted.inlineCallbacks
def test_failure_after_pooler_authentication_is_late(guarded_topology, pgbouncer, reactor):
    """
    With PostgreSQL stopped behind a live pooler, a new connection passes
    the pooler's SCRAM authentication, then the pooler fails it (it has no
    server).  The probe reports such a check as failed late: it cost a
    connection setup with authentication, so the dead host must be checked
    less often.  A check on the connection opened before the stop (the
    pooler queues its query) is cut by the deadline instead, not late.
    """
    topo = guarded_topology
    victim = topo.replicas[-1]
    (bouncer,) = yield poolers(pgbouncer, [victim], POOLER)
    env = {**pooled_env(topo, [bouncer]), **DEFAULTS}
    config = load_config(env)
    turns = ConnectTurns.for_hosts(reactor, config.sleep_ms, 1)
    probe = PostgresProbe(reactor, config.hosts[0], ConfigProvider(config), turns)

    def check() -> Any:
        # from a reactor turn of its own, as the monitor schedules checks
        def run() -> Any:
            deadline = Deadline(reactor, config.query_timeout_ms / 1000, probe.abort)
            d = probe.check(reactor.seconds(), deadline)
            return d.addBoth(lambda r: (deadline.stop(), r)[1])

        return deferLater(reactor, 0, run)

    try:
        obs = yield check()
        assert obs.in_recovery and probe.opened == 1
        yield blocking(victim.stop, "fast")
        outcomes = []
        for _ in range(3):
            try:
                yield check()
            except CheckFailed as e:
                outcomes.append((e.operation, e.late, e.message))
            else:
                raise AssertionError("a check succeeded with PostgreSQL stopped")
    finally:
        probe.close()
    print(f"[pooler] checks with PostgreSQL down: {outcomes}")
    assert outcomes[0][1] is False, outcomes  # the old connection: the deadline
    # new connections: authenticated by the pooler, then failed
    assert [late for _op, late, _m in outcomes[1:]] == [True, True], outcomes
    assert probe.opened == 3


@pytest_twisted.inlineCallbacks
def test_postgres_down_behind_pooler_is_dead_then_backs_off(guarded_topology, pgbouncer,
                                                             service, reactor):
    """
    Spec (Reaction speed): a replica's PostgreSQL stops while its pooler
    stays up.  The host is possibly dead, then dead within the detection
    bound; then, with the primary selected as master, its checks, which
    fail after the pooler's authentication, are spaced 2, 4, then 8 s with
    the default settings (counted as login attempts in the pooler's log).
    Started again, it is back within two of the longest periods plus the
    pooler's server_login_retry.
    """
    topo = guarded_topology
    victim = topo.replicas[-1]
    bouncers = yield poolers(pgbouncer, topo.nodes, POOLER)
    bouncer = bouncers[-1]
    svc = service({**pooled_env(topo, bouncers), **DEFAULTS})
    log = ViewLog(svc, reactor)
    names = [n.host for n in topo.nodes]
    yield wait_until(reactor, healthy(svc, *names), 10, "all healthy")

    t0 = reactor.seconds()
    yield blocking(victim.stop, "fast")
    allow = detection_allowance(1000, 1000, 3)
    yield wait_until(reactor, lambda: not svc.host(victim.host).alive, allow + 2, "dead")
    t_pd = log.first(lambda v: status(v, victim.host).possible_dead, t0)
    t_dead = log.first(lambda v: not status(v, victim.host).alive, t0)
    assert t_pd is not None and t_dead is not None
    assert t_dead - t0 <= allow, (t_dead - t0, allow)

    # the check that found it dead, then three more: 2 + 4 + 8 s
    def attempts() -> list[float]:
        return [t for t in login_times(bouncer) if t >= t_dead - 0.5]

    yield wait_until(reactor, lambda: len(attempts()) >= 4, 2 + 4 + 8 + 3,
                     "three login attempts after the host went dead", interval=0.2)
    seen = attempts()[:4]
    gaps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
    assert svc.view.master is not None and svc.view.master.name == topo.primary.host
    assert not svc.host(victim.host).alive
    checks_after = svc.monitor.monitors[-1].checks

    t1 = reactor.seconds()
    yield blocking(victim.start)
    # PgBouncer connects again on its own only every server_login_retry while
    # a client waits in its queue (the connection the deadline cut stays
    # there up to query_wait_timeout); else at a login, which it refuses
    # meanwhile: up to two periods, plus the retry and a margin
    back_within = 2 * MAX_DEAD_PERIOD + 1 + 2
    yield wait_until(reactor, healthy(svc, victim.host), back_within + 2, "recovery")
    t_up = log.first(lambda v: status(v, victim.host).healthy, t1)
    print(f"[pooler] postgres down behind pooler: possibly_dead={t_pd - t0:.2f}s "
          f"dead={t_dead - t0:.2f}s (allowed {allow:.2f}s); check spacing while dead: "
          f"{[round(g, 2) for g in gaps]}; recovered {t_up - t1:.2f}s after start")
    for got, want in zip(gaps, [2.0, 4.0, 8.0], strict=True):
        assert want - 0.3 <= got <= want + 0.7, gaps
    assert checks_after >= 4
    assert t_up - t1 <= back_within, t_up - t1


# --------------------------------------------------------------------------
# 3. promotion behind the poolers


@pytest_twisted.inlineCallbacks
def test_promotion_behind_poolers(fresh_topology, pgbouncer, service, reactor):
    """
    The primary stops and the replica is promoted, each behind its own
    pooler: pg-status selects the promoted node as master on timeline 2
    within one check of the promotion, and the old primary's pooler host
    goes dead.
    """
    topo = yield blocking(fresh_topology, 1)
    old, new = topo.nodes
    bouncers = yield poolers(pgbouncer, topo.nodes, POOLER)
    svc = service({**pooled_env(topo, bouncers), **FAST})
    log = ViewLog(svc, reactor)
    yield wait_until(reactor, healthy(svc, old.host, new.host), 10, "all healthy")
    assert svc.view.master.name == old.host
    assert svc.host(new.host).timeline == 1

    yield blocking(old.stop, "fast")
    t_promote = reactor.seconds()
    yield blocking(new.promote)
    promote = reactor.seconds() - t_promote
    one_check = (200 + 300) / 1000 + 0.2 + 0.5

    def new_master() -> bool:
        m = svc.view.master
        return m is not None and m.name == new.host and svc.host(new.host).timeline == 2

    yield wait_until(reactor, new_master, promote + one_check + 2, "the promoted master")
    t_new = log.first(lambda v: v.master is not None and v.master.name == new.host, t_promote)
    r = yield svc.get("/master")
    assert r.text == new.host
    yield wait_until(reactor, lambda: not svc.host(old.host).alive,
                     detection_allowance(200, 300, 3) + 2, "the old primary dead")
    hosts = (yield svc.get("/hosts")).json()
    assert [(h["host"], h["master"], h["alive"]) for h in hosts] == [
        (old.host, False, False), (new.host, True, True)]
    print(f"[pooler] promotion: pg_promote took {promote:.2f}s; new master selected "
          f"{t_new - t_promote:.2f}s after the promote call")
    assert t_new - t_promote <= promote + one_check


def test_pooler_error_at_login_counts_as_late():
    """
    Older PgBouncers refuse a login whose pool has no server with
    "ERROR:  pgbouncer cannot connect to server" (severity ERROR, where
    PostgreSQL sends FATAL): the setup got an answer from the pooler after
    authentication, so it fails late; a refused or reset TCP connection
    does not.
    """
    from pgstatus.monitor.failures import shows_auth_exchange

    assert shows_auth_exchange('connection to server at "127.0.0.2", port 6432 failed: '
                         "ERROR:  pgbouncer cannot connect to server")
    assert shows_auth_exchange("FATAL:  query_wait_timeout")
    assert not shows_auth_exchange("Connection was refused by other side: 111: Connection refused.")
    assert not shows_auth_exchange("server closed the connection unexpectedly")
