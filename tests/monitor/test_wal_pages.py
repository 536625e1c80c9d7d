"""
WAL positions at page boundaries and the full status query after a
reconnection, against real PostgreSQL servers.

Right after a WAL segment switch on an idle master, ``pg_current_wal_lsn()``
is the new segment's first byte while ``pg_current_wal_insert_lsn()`` is 40
bytes later, past the page's long header, and a caught-up replica reports
the boundary.  The header is not WAL: the replica is exactly at the master's
position (so ``lag_ms`` is bounded by the master's last check), and a
``min_lsn`` taken with ``pg_current_wal_insert_lsn()`` is met by it.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from pgtopology import PLAIN_PASSWORD, PLAIN_USER, lsn_to_int

from service import blocking, ready, wait_until

pytestmark = pytest.mark.pg

SLEEP_MS = 500
ENV = {
    "pg_status__sleep_ms": str(SLEEP_MS),
    "pg_status__query_timeout_ms": "1000",
    "pg_status__max_fails": "3",
}


def _header_state(primary) -> tuple[int, int, int, int] | None:
    """
    ``(write, insert, block_size, segment_size)`` when the master sits at
    a page boundary with only the page header between its write and insert
    positions; else ``None``.
    """
    write, insert, block, segment = primary.sql(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8,"
        " pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::int8,"
        " current_setting('wal_block_size')::int8,"
        " (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_segment_size')")[0]
    header = 40 if write % segment == 0 else 24
    if write % block == 0 and insert == write + header:
        return write, insert, block, segment
    return None


def _idle_at_segment_start(topo) -> tuple[int, int]:
    """
    Switch the idle master to a new WAL segment and wait until the replica
    has replayed up to it.

    :return: ``(boundary, insert position)``.
    """
    primary, replica = topo.primary, topo.replicas[0]
    primary.sql("SELECT pg_switch_wal()")
    state = _header_state(primary)
    assert state is not None, "the master did not stop at a segment start after pg_switch_wal()"
    boundary, insert, _, segment = state
    assert boundary % segment == 0 and insert == boundary + 40
    replica.wait_for(
        f"SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::int8 = {boundary}",
        timeout=10, what="replay up to the segment start")
    return boundary, insert


@pytest_twisted.inlineCallbacks
def test_idle_master_after_segment_switch(fresh_topology, service, reactor):
    """
    An idle master right after ``pg_switch_wal()``: the caught-up replica,
    which has replayed no commit since it started, gets a numeric
    ``lag_ms`` below ``sleep_ms`` (the bound applies); ``/sync_by_time``
    returns it; ``/replica?min_lsn=<insert position>`` returns it, though
    that position is 40 bytes past the replica's replay position.
    """
    topo = yield blocking(fresh_topology, 1)
    primary, replica = topo.primary, topo.replicas[0]
    lsn, _, _ = yield blocking(topo.write)
    yield blocking(topo.wait_replicated, lsn)
    # No commit replayed since the replica's start: its commit age is unknown,
    # so only the bound can give it a lag_ms.
    yield blocking(primary.sql, "CHECKPOINT")
    yield blocking(topo.wait_replicated, (yield blocking(primary.current_lsn)))
    yield blocking(replica.restart)
    assert (yield blocking(replica.value, "SELECT pg_last_xact_replay_timestamp()")) is None

    svc = service({**topo.hosts_env(), **ENV})
    yield wait_until(reactor, ready(svc), 10, "readiness")
    # The master may log a WAL record of its own (a running-xacts snapshot,
    # up to every 15 s) and leave the header state; then switch again.
    for _attempt in range(3):
        boundary, insert = yield blocking(_idle_at_segment_start, topo)

        def seen(boundary=boundary):
            m, r = svc.host(primary.host), svc.host(replica.host)
            return m.lsn == boundary and r.lsn == boundary and r.lag_ms is not None

        try:
            yield wait_until(reactor, seen, 5, "the replica's lag_ms at the segment start")
        except AssertionError:
            if (yield blocking(_header_state, primary)) is None:
                continue  # the master wrote WAL meanwhile: not the case under test
            raise
        h = svc.host(replica.host)
        assert 0 <= h.lag_ms < SLEEP_MS
        assert h.lag_bytes == 0
        r = yield svc.get(f"/sync_by_time?lag_ms={SLEEP_MS}")
        assert (r.code, r.text) == (200, replica.host)
        min_lsn = f"{insert >> 32:X}/{insert & 0xFFFFFFFF:X}"
        r = yield svc.get(f"/replica?min_lsn={min_lsn}&timeline=1")
        assert (r.code, r.text) == (200, replica.host)
        # one byte past the header is WAL the replica does not have
        past = insert + 1
        r = yield svc.get(f"/replica?min_lsn={past >> 32:X}/{past & 0xFFFFFFFF:X}")
        assert (r.code, r.text) == (200, primary.host)
        r = yield svc.get("/hosts")
        row = next(x for x in r.json() if x["host"] == replica.host)
        assert lsn_to_int(row["lsn"]) == boundary  # /hosts shows the position as reported
        state = yield blocking(_header_state, primary)
        if state is not None and state[0] == boundary:
            return  # every answer above was given in the header state
    pytest.fail("the master never stayed idle at a segment start long enough")


@pytest_twisted.inlineCallbacks
def test_full_query_again_after_reconnection(fresh_topology, service, reactor, log_events):
    """
    A role without SELECT on pg_stat_wal_receiver: the check falls back to
    the query without the receiver statistics (with the original's
    warning).  Granted again and with the backend terminated, the next
    connection runs the full query, as pg_stat_activity shows.
    """
    topo = yield blocking(fresh_topology, 1)
    primary, replica = topo.primary, topo.replicas[0]
    yield blocking(primary.sql, "REVOKE SELECT ON pg_stat_wal_receiver FROM PUBLIC")
    lsn, _, _ = yield blocking(topo.write)
    yield blocking(topo.wait_replicated, lsn)
    svc = service({**topo.hosts_env(user=PLAIN_USER, password=PLAIN_PASSWORD), **ENV})
    yield wait_until(reactor, ready(svc), 10, "readiness")

    def warned():
        return [line for line in log_events.text()
                if f"WARNING monitor: PostgreSQL permission denied host={replica.host} "
                   "sqlstate=42501; retrying poll without WAL receiver statistics "
                   "until reconnect; " in line]

    yield wait_until(reactor, warned, 5, "the permission warning")
    assert len(warned()) == 1

    def pg_status_queries() -> list[str]:
        return [q for (q,) in replica.sql(
            "SELECT query FROM pg_stat_activity WHERE application_name = 'pg-status'")]

    def last_query_reduced():
        qs = pg_status_queries()
        return qs if qs and "pg_is_in_recovery" in qs[0] \
            and "pg_stat_wal_receiver" not in qs[0] else None

    yield wait_until(reactor, lambda: blocking(last_query_reduced), 5, "the reduced query")
    yield blocking(primary.sql, "GRANT SELECT ON pg_stat_wal_receiver TO PUBLIC")
    lsn, _, _ = yield blocking(topo.write)
    yield blocking(topo.wait_replicated, lsn)
    # Still the reduced query on the same connection (the retry is after
    # 5 minutes or a reconnection).
    yield wait_until(reactor, lambda: blocking(last_query_reduced), 5, "the reduced query")
    terminated = yield blocking(replica.terminate_backends, "pg-status")
    assert terminated == 1

    def last_query_full():
        qs = pg_status_queries()
        return qs if qs and "pg_stat_wal_receiver" in qs[0] else None

    yield wait_until(reactor, lambda: blocking(last_query_full), 5, "the full query")
    yield wait_until(reactor, lambda: svc.host(replica.host).timeline == 1, 5,
                     "the receiver's timeline")
    assert len(warned()) == 1
