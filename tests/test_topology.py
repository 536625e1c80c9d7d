"""
The test topology and the TCP proxy do what the other tests rely on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time

import psycopg2
import pytest
import pytest_twisted
from pgtopology import PgNode, PgTopology, lsn_to_int, scratch_dir
from twisted.internet.threads import deferToThread

pytestmark = pytest.mark.pg


def postgres_pids() -> dict[int, str]:
    """Pid -> command line of every process of the ``postgres`` OS user (pgrep)."""
    r = subprocess.run(["pgrep", "-a", "-u", "postgres"], capture_output=True, text=True)
    return {int(p): cmd for p, _, cmd in (ln.partition(" ") for ln in r.stdout.splitlines())}


def server_of(host: str, port: int, connect_timeout: int = 3) -> tuple[str, bool]:
    """Connect (blocking) and return ``(inet_server_addr(), pg_is_in_recovery())``."""
    conn = psycopg2.connect(
        host=host, port=port, user="postgres", password="postgres", dbname="postgres",
        connect_timeout=connect_timeout,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT host(inet_server_addr()), pg_is_in_recovery()")
            return cur.fetchone()
    finally:
        conn.close()


# --------------------------------------------------------------------------
# topology


def test_nodes_listen_on_distinct_loopback_addresses(pg_topology: PgTopology) -> None:
    """Each node answers on its own address with its role, and only there."""
    topo = pg_topology
    assert [n.host for n in topo.nodes] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    for node in topo.nodes:
        assert server_of(node.host, node.port) == (node.host, node is not topo.primary)
    with pytest.raises(psycopg2.OperationalError, match="refused"):
        server_of("127.0.0.9", topo.primary.port)
    env = topo.hosts_env()
    assert env["pg_status__hosts"] == "127.0.0.1,127.0.0.2,127.0.0.3"
    assert env["pg_status__pg_port"] == ",".join(str(n.port) for n in topo.nodes)


def test_roles_exist(pg_topology: PgTopology) -> None:
    """The monitor role has pg_monitor, the plain one has nothing."""
    node = pg_topology.replicas[0]
    rows = node.sql(
        "SELECT pg_has_role(current_user, 'pg_monitor', 'MEMBER')",
        user="pgstatus_monitor", password="monitor",
    )
    assert rows == [(True,)]
    rows = node.sql(
        "SELECT pg_has_role(current_user, 'pg_monitor', 'MEMBER')",
        user="pgstatus_plain", password="plain",
    )
    assert rows == [(False,)]
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        node.sql("SELECT 1", password="wrong")


def test_row_written_on_primary_is_read_on_both_replicas(pg_topology: PgTopology) -> None:
    """write() returns a position that, once replayed, covers the row."""
    lsn, timeline, row_id = pg_topology.write("hello")
    assert timeline == 1
    pg_topology.wait_replicated(lsn)
    for replica in pg_topology.replicas:
        assert replica.sql("SELECT payload FROM rw_check WHERE id = %s", (row_id,)) == [
            ("hello",)
        ]
        assert lsn_to_int(replica.replay_lsn()) >= lsn_to_int(lsn)


def test_pause_replay_stops_replay_lsn(guarded_topology: PgTopology) -> None:
    """A paused replica receives WAL but does not replay it until resumed."""
    topo = guarded_topology
    paused, other = topo.replicas
    paused.pause_replay()
    before = paused.replay_lsn()
    lsn, _, row_id = topo.write("while paused")
    assert lsn_to_int(lsn) > lsn_to_int(before)
    topo.wait_replicated(lsn, nodes=[other])
    paused.wait_for("SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", (lsn,))
    assert paused.replay_lsn() == before
    assert not topo.has_row(paused, row_id)
    paused.resume_replay()
    topo.wait_replicated(lsn)
    assert topo.has_row(paused, row_id)


def test_stop_and_start(guarded_topology: PgTopology) -> None:
    """A stopped node refuses connections; started again, it streams."""
    replica = guarded_topology.replicas[1]
    replica.stop()
    assert not replica.is_running()
    with pytest.raises(psycopg2.OperationalError, match="refused"):
        replica.sql("SELECT 1")
    replica.start()
    guarded_topology.wait_streaming()
    lsn, _, row_id = guarded_topology.write()
    guarded_topology.wait_replicated(lsn)
    assert guarded_topology.has_row(replica, row_id)


def test_kill_leaves_no_process(guarded_topology: PgTopology) -> None:
    """kill() takes the postmaster and all its children; start() recovers."""
    replica = guarded_topology.replicas[0]
    pids = replica.all_pids()
    assert len(pids) > 3
    replica.kill()
    assert not set(postgres_pids()) & set(pids)
    replica.start()
    guarded_topology.wait_streaming()
    assert replica.is_in_recovery()


def test_sigstop_hangs_connects_and_sessions(guarded_topology: PgTopology) -> None:
    """A frozen server accepts TCP but never answers; sigcont resumes it."""
    primary = guarded_topology.primary
    session = primary.connect()
    result: list[object] = []
    try:
        primary.sigstop()
        query = threading.Thread(
            target=lambda: result.append(_fetch(session, "SELECT 42")), daemon=True
        )
        query.start()
        started = time.monotonic()
        with pytest.raises(psycopg2.OperationalError, match="timeout"):
            primary.connect(connect_timeout=1)
        assert time.monotonic() - started >= 1.5  # libpq's minimum is 2 s
        assert query.is_alive() and result == []
        primary.sigcont()
        query.join(5)
        assert result == [42]
        assert primary.value("SELECT 1") == 1
    finally:
        primary.sigcont()
        session.close()


def _fetch(conn: psycopg2.extensions.connection, query: str) -> object:
    with conn.cursor() as cur:
        cur.execute(query)
        return cur.fetchone()[0]


def test_promotion_on_fresh_topology(fresh_topology) -> None:
    """After failover the new primary writes on timeline 2 and the other
    replica follows it."""
    topo = fresh_topology(replicas=2)
    old = topo.primary
    lsn, timeline, _ = topo.write("before")
    assert timeline == 1
    topo.wait_replicated(lsn)
    new, other = topo.replicas
    topo.failover(new)
    assert topo.primary is new and not old.is_running()
    assert not new.is_in_recovery()
    lsn, timeline, row_id = topo.write("after")
    assert timeline == 2
    topo.wait_replicated(lsn)
    assert topo.has_row(other, row_id)
    assert other.timeline() == 2


def test_teardown_leaves_no_process(fresh_topology) -> None:
    """Teardown stops every server, frozen ones too, and removes the data."""
    topo = fresh_topology(replicas=1)
    pids = set(topo.all_pids())
    assert {n.pid for n in topo.nodes} <= set(postgres_pids())
    topo.replicas[0].sigstop()
    topo.teardown()
    assert not set(postgres_pids()) & pids
    assert not os.path.exists(topo.base_dir)


def test_partial_start_failure_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A topology that fails half-way leaves no process and no data."""
    parent = tempfile.mkdtemp(prefix="pgstatus-test-", dir=scratch_dir())
    os.chmod(parent, 0o755)
    base_dir = os.path.join(parent, "topo")
    real_start = PgNode.start
    started: set[int] = set()

    def failing_start(self: PgNode, timeout: float = 30) -> None:
        real_start(self, timeout)
        started.update(self.all_pids())
        if self.name == "replica2":
            raise RuntimeError("injected failure")

    monkeypatch.setattr(PgNode, "start", failing_start)
    try:
        with pytest.raises(RuntimeError, match="injected failure"):
            PgTopology.start(base_dir, replicas=2)
        assert len(started) > 10
        assert not set(postgres_pids()) & started
        assert not [c for c in postgres_pids().values() if base_dir in c]
        assert not os.path.exists(base_dir)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


# --------------------------------------------------------------------------
# TCP proxy (the client side runs in a thread: it needs the reactor to answer)


@pytest_twisted.inlineCallbacks
def test_proxy_pass(pg_topology: PgTopology, tcp_proxy) -> None:
    """pass_() forwards to the target."""
    proxy = tcp_proxy(pg_topology.primary)
    result = yield deferToThread(server_of, proxy.host, proxy.port)
    assert tuple(result) == ("127.0.0.1", False)
    assert proxy.accepted == 1 and proxy.forwarded == 1


@pytest_twisted.inlineCallbacks
def test_proxy_refuse_then_pass_on_same_port(pg_topology: PgTopology, tcp_proxy) -> None:
    """refuse() makes connects fail with ECONNREFUSED; pass_() re-listens."""
    proxy = tcp_proxy(pg_topology.replicas[0])
    port = proxy.port
    yield proxy.refuse()
    with pytest.raises(psycopg2.OperationalError, match="refused"):
        yield deferToThread(server_of, proxy.host, proxy.port)
    yield proxy.pass_()
    assert proxy.port == port
    result = yield deferToThread(server_of, proxy.host, proxy.port)
    assert tuple(result) == ("127.0.0.2", True)


@pytest_twisted.inlineCallbacks
def test_proxy_hang(pg_topology: PgTopology, tcp_proxy) -> None:
    """hang() makes new connects time out and freezes open sessions until
    pass_()."""
    proxy = tcp_proxy(pg_topology.primary)
    conn = yield deferToThread(
        psycopg2.connect, host=proxy.host, port=proxy.port, user="postgres",
        password="postgres", dbname="postgres", connect_timeout=3,
    )
    try:
        yield proxy.hang()
        query = deferToThread(_fetch, conn, "SELECT 7")
        started = time.monotonic()
        with pytest.raises(psycopg2.OperationalError, match="timeout"):
            yield deferToThread(server_of, proxy.host, proxy.port, 1)
        assert time.monotonic() - started >= 1.5
        assert not query.called
        yield proxy.pass_()
        assert (yield query) == 7
        result = yield deferToThread(server_of, proxy.host, proxy.port)
        assert tuple(result) == ("127.0.0.1", False)
    finally:
        yield deferToThread(conn.close)


@pytest_twisted.inlineCallbacks
def test_proxy_close_after_startup(pg_topology: PgTopology, tcp_proxy) -> None:
    """close_after_startup() makes connects fail at once."""
    proxy = tcp_proxy(pg_topology.primary)
    yield proxy.close_after_startup()
    started = time.monotonic()
    with pytest.raises(psycopg2.OperationalError, match="closed the connection"):
        yield deferToThread(server_of, proxy.host, proxy.port)
    assert time.monotonic() - started < 1
    assert proxy.accepted >= 1 and proxy.forwarded == 0


@pytest_twisted.inlineCallbacks
def test_proxy_retarget(pg_topology: PgTopology, tcp_proxy) -> None:
    """retarget() sends new connections elsewhere, keeping or dropping the
    existing ones."""
    primary, replica = pg_topology.primary, pg_topology.replicas[1]
    proxy = tcp_proxy(primary)
    conn = yield deferToThread(
        psycopg2.connect, host=proxy.host, port=proxy.port, user="postgres",
        password="postgres", dbname="postgres", connect_timeout=3,
    )
    try:
        yield proxy.retarget(replica.host, replica.port)
        result = yield deferToThread(server_of, proxy.host, proxy.port)
        assert tuple(result) == ("127.0.0.3", True)
        assert (yield deferToThread(_fetch, conn, "SELECT pg_is_in_recovery()")) is False
        yield proxy.retarget(primary.host, primary.port, drop_existing=True)
        assert proxy.active == 0
        with pytest.raises(psycopg2.OperationalError):
            yield deferToThread(_fetch, conn, "SELECT 1")
        result = yield deferToThread(server_of, proxy.host, proxy.port)
        assert tuple(result) == ("127.0.0.1", False)
    finally:
        yield deferToThread(conn.close)
    yield proxy.stop()
    assert proxy.active == 0 and not proxy.listening
    with pytest.raises(psycopg2.OperationalError, match="refused"):
        yield deferToThread(server_of, proxy.host, proxy.port)
