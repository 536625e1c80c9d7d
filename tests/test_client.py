"""
``pgstatus.client`` against a running service and the real topology: typed
answers of every endpoint, read-your-writes with ``write_position`` (the
replica returned has the row), the server's 400s passed through, NotReady
before readiness, ``None`` when there is no host, and the psycopg2 helper's
refusal to run inside a transaction.
"""

from __future__ import annotations

import psycopg2
import pytest
import pytest_twisted
from pgtopology import SUPERUSER, SUPERUSER_PASSWORD, free_port
from twisted.web.client import HTTPConnectionPool

from pgstatus.client import (
    HostChoice,
    HostReport,
    NotReady,
    PgStatusClient,
    PgStatusError,
    WritePosition,
    write_position,
)
from service import RunningService, blocking, wait_until

FAST = {"pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "1000"}
# Long period: only the checks a wait_ms request triggers can see a new write.
SLOW = {"pg_status__sleep_ms": "30000", "pg_status__query_timeout_ms": "1000"}


@pytest.fixture
def running(reactor):
    """
    Factory: ``running(env)`` -> ``(service, client)``, both stopped after
    the test.
    """
    made = []

    def make(env, **client_kwargs):
        svc = RunningService(reactor, env)
        client = PgStatusClient(svc.base, reactor, **client_kwargs)
        made.append((svc, client))
        return svc, client

    yield make
    for svc, client in made:
        pytest_twisted.blockon(client.close())
        pytest_twisted.blockon(svc.stop())


def ready(svc):
    return lambda: svc.view.ready


def connect(node):
    """
    A DB-API connection as an application has it: not in autocommit.
    """
    conn = psycopg2.connect(host=node.host, port=node.port, user=SUPERUSER,
                            password=SUPERUSER_PASSWORD, dbname="postgres",
                            sslmode="disable", connect_timeout=3)
    assert conn.autocommit is False
    return conn


def committed_write(node, autocommit=False):
    """
    Insert a row, commit, then take the write position: ``(row, position,
    transaction status afterwards)``.
    """
    conn = connect(node)
    conn.autocommit = autocommit
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO rw_check (payload) VALUES ('client') RETURNING id")
            row = cur.fetchone()[0]
            if not autocommit:
                conn.commit()
            pos = write_position(cur)
        return row, pos, conn.info.transaction_status
    finally:
        conn.close()


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_typed_answers(pg_topology, running, reactor):
    topo = pg_topology
    primary, r1, r2 = topo.nodes
    svc, client = running({
        **topo.hosts_env(), **FAST,
        "pg_status__hosts_dc": "dc1,dc2,dc3",
        "pg_status__hosts_geo": "eu,eu,us",
        "pg_status__current_dc": "dc2",
        "pg_status__current_geo": "eu",
    })
    yield wait_until(reactor, lambda: svc.view.ready and all(
        svc.host(n.host).lag_ms is not None and svc.host(n.host).lag_bytes is not None
        for n in topo.replicas), 10, "readiness and measured lags")
    assert (yield client.master()) == HostChoice(primary.host, "dc1", "eu")
    # locality: the replica in dc2 first
    for _ in range(3):
        assert (yield client.replica()) == HostChoice(r1.host, "dc2", "eu")
    assert (yield client.sync_by_bytes(lag_bytes=10**12)) == HostChoice(r1.host, "dc2", "eu")
    assert (yield client.sync_by_time_or_bytes(lag_ms=10**9, lag_bytes=10**12)).host == r1.host
    assert (yield client.sync_by_time_and_bytes(lag_ms=0, lag_bytes=0)) is not None
    assert (yield client.sync_by_time(lag_ms=10**9)).host == r1.host
    # no locality on most_sync_by_bytes; a replica or the master
    assert (yield client.most_sync_by_bytes(lag_bytes=10**12)).host in {n.host for n in topo.nodes}
    # a replica on an unknown timeline does not match: the master
    assert (yield client.replica(timeline=4294967295)).host == primary.host

    hosts = yield client.hosts()
    assert [type(h) for h in hosts] == [HostReport] * 3
    assert [(h.host, h.dc, h.geo, h.master, h.alive) for h in hosts] == [
        (primary.host, "dc1", "eu", True, True), (r1.host, "dc2", "eu", False, True),
        (r2.host, "dc3", "us", False, True)]
    assert hosts[0].lag_ms == 0 and hosts[0].lag_bytes == 0 and isinstance(hosts[0].lsn, str)
    s = yield client.status(r2.host)
    assert isinstance(s, HostReport)
    assert (s.host, s.dc, s.geo, s.master, s.alive) == (r2.host, "dc3", "us", False, True)
    with pytest.raises(PgStatusError) as e:
        yield client.status("no-such-host")
    assert (e.value.status, e.value.error_text) == (404, None)
    assert not isinstance(e.value, NotReady)

    # only types are checked locally
    for bad in ({"lag_ms": "5"}, {"lag_ms": True}, {"lag_bytes": 1.0}, {"min_lsn": 0x3000060},
                {"timeline": "1"}, {"wait_ms": "1"}, {"key": 1}):
        with pytest.raises(TypeError):
            client.replica(**bad)
    with pytest.raises(TypeError):
        client.status(None)


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_read_your_writes(pg_topology, running, reactor):
    """
    write_position after COMMIT, then replica(min_lsn, timeline): at once
    (the service has not seen the write) the master; with wait_ms a replica
    that has the row.  Autocommit works the same way.
    """
    topo = pg_topology
    svc, client = running({**topo.hosts_env(), **SLOW})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    replicas = {n.host: n for n in topo.replicas}
    timeline = yield blocking(topo.primary.timeline)
    for autocommit in (False, True, False):
        row, pos, status_after = yield blocking(committed_write, topo.primary, autocommit)
        assert isinstance(pos, WritePosition) and pos.timeline == timeline
        lsn, tl = pos
        assert isinstance(lsn, str) and "/" in lsn
        assert status_after == psycopg2.extensions.TRANSACTION_STATUS_IDLE
        now = yield client.replica(min_lsn=lsn, timeline=tl)
        assert now.host == topo.primary.host
        fresh = yield client.replica(min_lsn=lsn, timeline=tl, wait_ms=3000)
        assert fresh.host in replicas, fresh
        assert (yield blocking(topo.has_row, replicas[fresh.host], row))
        # the same position on the other selection endpoints
        for call in (client.sync_by_time, client.sync_by_bytes):
            choice = yield call(min_lsn=lsn, timeline=tl, wait_ms=3000)
            assert choice.host in replicas
            assert (yield blocking(topo.has_row, replicas[choice.host], row))


@pytest.mark.pg
def test_write_position_refuses_an_open_transaction(pg_topology):
    conn = connect(pg_topology.primary)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO rw_check (payload) VALUES ('uncommitted')")
            with pytest.raises(RuntimeError, match="after COMMIT"):
                write_position(cur)
            conn.rollback()
            # the spec's query, on a cursor after the commit
            cur.execute("SELECT 1")
            conn.commit()
            lsn, tl = write_position(cur)
            cur.execute("SELECT pg_current_wal_insert_lsn() >= %s::pg_lsn", (lsn,))
            assert cur.fetchone()[0] is True
            assert tl == pg_topology.primary.timeline()
        # on a standby there is no insert position
        replica = connect(pg_topology.replicas[0])
        try:
            with replica.cursor() as cur, pytest.raises(psycopg2.Error):
                write_position(cur)
            assert replica.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
        finally:
            replica.close()
    finally:
        conn.close()


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_server_errors_pass_through(pg_topology, running, reactor):
    svc, client = running({**pg_topology.hosts_env(), **FAST})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    cases = [
        (client.replica, {"lag_ms": -1}, "Invalid lag_ms"),
        (client.replica, {"lag_bytes": 2**64}, "Invalid lag_bytes"),
        (client.replica, {"min_lsn": "3000060"}, "Invalid min_lsn"),
        (client.replica, {"min_lsn": ""}, "Invalid min_lsn"),
        (client.replica, {"timeline": 0}, "Invalid timeline"),
        (client.replica, {"wait_ms": 60001}, "Invalid wait_ms"),
        (client.sync_by_time, {"lag_ms": -5}, "Invalid lag_ms"),
        (client.sync_by_bytes, {"timeline": 2**32}, "Invalid timeline"),
        (client.most_sync_by_bytes, {"lag_bytes": -1}, "Invalid lag_bytes"),
        (client.replica, {"key": ""}, "Invalid key"),
        (client.sync_by_bytes, {"key": "k" * 257}, "Invalid key"),
    ]
    for call, kwargs, text in cases:
        with pytest.raises(PgStatusError) as e:
            yield call(**kwargs)
        assert (e.value.status, e.value.error_text) == (400, text), kwargs
        assert not isinstance(e.value, NotReady)
        assert text in str(e.value)
    # a wrong base URL is an error, not "no host"
    wrong = PgStatusClient(svc.base + "/nowhere", reactor)
    try:
        with pytest.raises(PgStatusError) as e:
            yield wrong.master()
        assert (e.value.status, e.value.error_text) == (404, None)
    finally:
        yield wrong.close()


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_no_host_is_none(pg_topology, running, reactor):
    """
    Without a master: master() and an unsatisfiable replica() are None;
    replica() without limits still names a replica, with a session key
    always the same one.  A request timeout cancels a long wait.
    """
    topo = pg_topology
    svc, client = running({**topo.hosts_env(nodes=topo.replicas), **FAST})
    yield wait_until(reactor, lambda: svc.view.ready and all(h.alive for h in svc.view.hosts),
                     10, "readiness")
    assert (yield client.master()) is None
    assert (yield client.replica(min_lsn="FFFFFFFF/FFFFFFFF")) is None
    assert (yield client.most_sync_by_bytes(timeline=4294967295)) is None
    assert (yield client.replica()).host in {n.host for n in topo.replicas}
    # a session key keeps its replica; the keys spread over both
    chosen = set()
    for key in [f"session-{i}" for i in range(20)] + ["s\u00fc/&=?"]:
        got = set()
        for _ in range(3):
            got.add((yield client.replica(key=key)).host)
        assert len(got) == 1, key
        chosen |= got
    assert chosen == {n.host for n in topo.replicas}
    pool = HTTPConnectionPool(reactor, persistent=True)
    hasty = PgStatusClient(svc.base, reactor, pool=pool, timeout=0.2)
    try:
        t0 = reactor.seconds()
        with pytest.raises(TimeoutError):
            yield hasty.replica(min_lsn="FFFFFFFF/FFFFFFFF", wait_ms=1000)
        assert reactor.seconds() - t0 < 0.9
        yield hasty.close()  # leaves a pool it did not make alone
        assert (yield hasty.replica()).host in {n.host for n in topo.replicas}
    finally:
        yield pool.closeCachedConnections()


@pytest_twisted.inlineCallbacks
def test_not_ready(blackhole, running, reactor):
    """
    Before every host has been checked: NotReady (503) from every host
    endpoint, before any parameter is validated.
    """
    svc, client = running({"pg_status__hosts": "127.0.0.1,127.0.0.2",
                           "pg_status__pg_port": f"{blackhole},{free_port('127.0.0.2')}",
                           "pg_status__query_timeout_ms": "30000"})
    calls = [client.master(), client.replica(lag_ms=-1), client.sync_by_time(),
             client.most_sync_by_bytes(), client.hosts(), client.status("127.0.0.1")]
    for d in calls:
        with pytest.raises(NotReady) as e:
            yield d
        assert (e.value.status, e.value.error_text) == (503, "pg_monitor is not ready")
        assert isinstance(e.value, PgStatusError)
    assert not svc.view.ready
