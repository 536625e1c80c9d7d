"""
The poll query's text where tools look for it: the original service's
end-to-end suite finds its poll query in ``pg_stat_activity`` by the text
``from pg_catalog.pg_stat_wal_receiver`` (lower case), so ours carries it
too, in the query as built and as a replica's ``pg_stat_activity`` shows it.
"""

from __future__ import annotations

import pytest
import pytest_twisted

from pgstatus.monitor.query import status_query
from service import blocking, ready, wait_until

RECEIVER = "from pg_catalog.pg_stat_wal_receiver"


def test_receiver_part_in_lower_case() -> None:
    """
    Both receiver subqueries of the full query read the view with
    ``from`` in lower case; the reduced queries do not read it at all.
    """
    full = status_query(0)
    assert full.count(RECEIVER) == 2, full
    # pg_stat_activity shows the first track_activity_query_size bytes
    # (1024 by default): the text must be within them
    assert RECEIVER in full.encode()[:1024].decode(errors="ignore")
    assert "FROM pg_catalog.pg_stat_wal_receiver" not in full
    for level in (1, 2):
        assert "pg_stat_wal_receiver" not in status_query(level)


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_replica_activity_shows_the_text(pg_topology, service, reactor) -> None:
    """
    On a real replica, the query pg-status's session runs, as
    ``pg_stat_activity`` shows it (cut at ``track_activity_query_size``,
    1024 bytes by default), contains the exact text.
    """
    topo = pg_topology
    replica = topo.replicas[0]
    svc = service({**topo.hosts_env(nodes=[topo.primary, replica]),
                   "pg_status__sleep_ms": "200"})
    yield wait_until(reactor, ready(svc), 10, "readiness")

    def status_query_seen() -> list[str]:
        return [q for (q,) in replica.sql(
            "SELECT query FROM pg_stat_activity WHERE application_name = 'pg-status'")
            if q.startswith("SELECT r.rec,")]

    (queries, _) = yield wait_until(reactor, lambda: blocking(status_query_seen), 5,
                                    "the status query in pg_stat_activity")
    assert all(RECEIVER in q for q in queries), queries
