"""
The poll queries under a hostile ``search_path`` (the CVE-2018-1058 class),
against real PostgreSQL servers.

A role whose ``search_path`` puts a schema before ``pg_catalog`` resolves
unqualified names there first: functions, views, operators and the type
names of casts.  Each schema below shadows one kind of name: functions and
views that lie (the opposite recovery state, made-up WAL positions, clock,
timeline and WAL geometry), operators that lie (``||`` makes up the WAL file
name, ``=`` matches every row), and domains named like the cast types that
refuse every value, NULL included.  Every shadowing function counts its
calls in a sequence, so a call shows even where its answer would not
(and fails the statement on a hot standby).  Logged in as a role whose
``search_path`` (set with ``ALTER ROLE``) starts with such a schema,
pg-status's probe, the service and ``write_position`` must still see and
report what the servers really are, and call none of those functions.
The tests first check that the trap works: unqualified SQL run as that
role does get the lies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from pgtopology import PgNode, PgTopology, lsn_to_int
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater

from pgstatus.client import write_position
from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.monitor.probe import PostgresProbe
from pgstatus.monitor.query import status_query
from pgstatus.monitor.turns import ConnectTurns, Deadline
from service import blocking, ready, wait_until

pytestmark = pytest.mark.pg

PASSWORD = "shadow"
#: what the lying objects answer
FAKE_LSN = "0/7"
FAKE_TIMELINE = 9
FAKE_TIME = "2001-02-03 04:05:06+00"
#: the sequences every shadowing function advances before it answers: on
#: the primary, their values count the calls; on a hot standby, a call fails
#: the statement (no nextval() in a read-only transaction)
CALLS = ("evil_functions.calls", "evil_operators.calls")


def _lie(name: str, args: str, returns: str, answer: str) -> str:
    """A SQL function ``name(args)`` that counts its call and answers ``answer``."""
    schema = name.split(".")[0]
    return (f"CREATE FUNCTION {name}({args}) RETURNS {returns} LANGUAGE sql"
            f" SET search_path = pg_catalog AS $$"
            f" SELECT pg_catalog.nextval('{schema}.calls'); SELECT {answer} $$")


SHADOW_SQL = {
    "functions": [
        "CREATE SCHEMA evil_functions",
        "CREATE SEQUENCE evil_functions.calls",
        _lie("evil_functions.pg_is_in_recovery", "", "boolean",
             "NOT pg_catalog.pg_is_in_recovery()"),
        _lie("evil_functions.clock_timestamp", "", "timestamptz",
             f"'{FAKE_TIME}'::pg_catalog.timestamptz"),
        *(_lie(f"evil_functions.{f}", "", "pg_lsn", f"'{FAKE_LSN}'::pg_catalog.pg_lsn")
          for f in ("pg_current_wal_lsn", "pg_current_wal_insert_lsn",
                    "pg_last_wal_replay_lsn", "pg_last_wal_receive_lsn")),
        _lie("evil_functions.pg_last_xact_replay_timestamp", "", "timestamptz",
             f"'{FAKE_TIME}'::pg_catalog.timestamptz"),
        _lie("evil_functions.pg_wal_lsn_diff", "pg_lsn, pg_lsn", "numeric",
             "7::pg_catalog.numeric"),
        _lie("evil_functions.pg_walfile_name", "pg_lsn", "text",
             f"'{FAKE_TIMELINE:08X}0000000000000007'::pg_catalog.text"),
        _lie("evil_functions.substr", "text, integer, integer", "text",
             f"'{FAKE_TIMELINE:08X}'::pg_catalog.text"),
        _lie("evil_functions.pg_control_checkpoint", "", "TABLE (timeline_id integer)",
             str(FAKE_TIMELINE)),
        _lie("evil_functions.current_setting", "text", "text", "'512'::pg_catalog.text"),
        "CREATE VIEW evil_functions.pg_settings AS"
        " SELECT 'wal_segment_size'::text AS name, '1024'::text AS setting",
        "CREATE VIEW evil_functions.pg_stat_wal_receiver AS"
        f" SELECT '{FAKE_LSN}'::pg_lsn AS latest_end_lsn, {FAKE_TIMELINE} AS received_tli",
    ],
    "operators": [
        "CREATE SCHEMA evil_operators",
        "CREATE SEQUENCE evil_operators.calls",
        _lie("evil_operators.cat", "text, text", "text",
             f"'x{FAKE_TIMELINE:08X}'::pg_catalog.text"),
        "CREATE OPERATOR evil_operators.|| (LEFTARG = text, RIGHTARG = text,"
        " FUNCTION = evil_operators.cat)",
        _lie("evil_operators.eq", "text, text", "boolean", "true"),
        "CREATE OPERATOR evil_operators.= (LEFTARG = text, RIGHTARG = text,"
        " FUNCTION = evil_operators.eq)",
    ],
    "types": [
        # a cast to one of these fails, NULL included
        "CREATE SCHEMA evil_types",
        "CREATE DOMAIN evil_types.int8 AS pg_catalog.int8 NOT NULL CHECK (VALUE < 0)",
        "CREATE DOMAIN evil_types.float8 AS pg_catalog.float8 NOT NULL CHECK (VALUE < 0)",
        "CREATE DOMAIN evil_types.text AS pg_catalog.text NOT NULL CHECK (VALUE = '')",
        # never used: bit(n) is keyword syntax, always pg_catalog.bit
        "CREATE DOMAIN evil_types.bit AS pg_catalog.bit(32) NOT NULL CHECK (VALUE IS NULL)",
    ],
}
#: each role's search_path ("all": every shadowing schema before pg_catalog)
#: and whether it has pg_monitor: without it, the WAL receiver's timeline
#: is hidden and a replica's timeline comes from the control file
ROLES = {
    "functions": ("evil_functions, pg_catalog", True),
    "functions_unprivileged": ("evil_functions, pg_catalog", False),
    "operators": ("evil_operators, pg_catalog", True),
    "types": ("evil_types, pg_catalog", True),
    "all": ("evil_types, evil_operators, evil_functions, pg_catalog", True),
}


def _role(kind: str) -> str:
    return f"pgstatus_shadow_{kind}"


@pytest.fixture(scope="module")
def shadowed(pg_topology: PgTopology) -> Iterator[PgTopology]:
    """
    The session topology with the shadowing schemas and the roles of
    :data:`ROLES`, on every node; dropped after the module.
    """
    primary = pg_topology.primary

    def drop() -> None:
        for kind in SHADOW_SQL:
            primary.sql(f"DROP SCHEMA IF EXISTS evil_{kind} CASCADE")
        for kind in ROLES:
            primary.sql(f"DROP ROLE IF EXISTS {_role(kind)}")

    drop()
    try:
        for statements in SHADOW_SQL.values():
            for statement in statements:
                primary.sql(statement)
        for kind, (path, monitor) in ROLES.items():
            role = _role(kind)
            primary.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
            if monitor:
                primary.sql(f"GRANT pg_monitor TO {role}")
            primary.sql(f"ALTER ROLE {role} SET search_path = {path}")
            for schema in path.split(", ")[:-1]:
                primary.sql(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
                primary.sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
                primary.sql(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
        pg_topology.wait_replicated(primary.current_lsn())
        yield pg_topology
    finally:
        drop()


def _as_role(node: PgNode, kind: str, query: str) -> Any:
    """First value of unqualified ``query`` run as the ``kind`` role."""
    conn = node.connect(user=_role(kind), password=PASSWORD)
    try:
        with conn.cursor() as cur:
            cur.execute(query)
            return cur.fetchone()[0]
    finally:
        conn.close()


def _assert_trap_works(topo: PgTopology, kind: str) -> None:
    """
    Unqualified SQL run as the role gets the shadowing objects: without
    this, the tests below would pass whatever the queries say.
    """
    primary = topo.primary
    if kind.startswith("functions"):
        assert _as_role(primary, kind, "SELECT pg_is_in_recovery()") is True
        assert _as_role(primary, kind, "SELECT pg_current_wal_lsn()::pg_catalog.text") == FAKE_LSN
        assert _as_role(primary, kind,
                        "SELECT count(*) FROM pg_settings") == 1
    if kind == "operators":
        assert _as_role(primary, kind, "SELECT 'a' || 'b'") == f"x{FAKE_TIMELINE:08X}"
        assert _as_role(primary, kind,
                        "SELECT count(*) FROM pg_catalog.pg_settings WHERE name = 'nonesuch'") > 1
    if kind in ("types", "all"):
        with pytest.raises(psycopg2.errors.CheckViolation):
            _as_role(primary, kind, "SELECT 1::int8")
    if kind == "all":
        assert _as_role(primary, kind, "SHOW search_path") == ROLES["all"][0]
        assert _as_role(primary, kind, "SELECT pg_is_in_recovery()") is True
        assert _as_role(primary, kind, "SELECT 'a' || 'b'") == f"x{FAKE_TIMELINE:08X}"


def _real(node: PgNode) -> dict[str, Any]:
    """What the node really is, read as the superuser."""
    row = node.sql(
        "SELECT pg_is_in_recovery(),"
        " CASE WHEN pg_is_in_recovery() THEN NULL"
        "  ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8 END,"
        " pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::int8,"
        " pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')::int8,"
        " (SELECT pg_wal_lsn_diff(latest_end_lsn, '0/0')::int8 FROM pg_stat_wal_receiver),"
        " extract(epoch FROM pg_last_xact_replay_timestamp())::float8,"
        " current_setting('wal_block_size')::int8,"
        " (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_segment_size')")[0]
    recovery, wal, replay, receive, latest_end, replay_ts, block, segment = row
    return {"recovery": recovery, "wal": wal, "replay": replay, "receive": receive,
            "latest_end": latest_end, "replay_ts": replay_ts,
            "geometry": (block, segment), "timeline": node.timeline()}


def _calls(primary: PgNode) -> int:
    """How many times the shadowing functions have run on the primary."""
    return sum(primary.value(f"SELECT coalesce(pg_sequence_last_value('{seq}'), 0)")
               for seq in CALLS)


@inlineCallbacks
def _observe(reactor: Any, topo: PgTopology, node: PgNode, kind: str) -> Any:
    """One check of ``node`` by pg-status's probe, logged in as the ``kind`` role."""
    config = load_config({**topo.hosts_env(user=_role(kind), password=PASSWORD, nodes=[node]),
                          "pg_status__query_timeout_ms": "2000"})
    probe = PostgresProbe(reactor, config.hosts[0], ConfigProvider(config),
                          ConnectTurns.for_hosts(reactor, config.sleep_ms, 1))

    def run() -> Any:
        deadline = Deadline(reactor, config.query_timeout_ms / 1000, probe.abort)
        d = probe.check(reactor.seconds(), deadline)
        return d.addBoth(lambda r: (deadline.stop(), r)[1])

    try:
        return (yield deferLater(reactor, 0, run))
    finally:
        probe.close()


@pytest.mark.parametrize("kind", list(ROLES))
@pytest_twisted.inlineCallbacks
def test_probe_sees_through_shadowing_schema(shadowed, reactor, kind):
    """
    The probe, logged in as a role whose search_path starts with a
    shadowing schema: the primary is a master at its real WAL position and
    timeline, the replica a replica at its real replay position, receiver
    position, commit time and timeline; both with the real clock and WAL
    geometry.  A role with ``pg_monitor`` gets the receiver's position and
    timeline; one without gets no receiver position, and the timeline from
    the control file.
    """
    topo = shadowed
    yield blocking(_assert_trap_works, topo, kind)
    primary, replica = topo.primary, topo.replicas[0]

    calls = yield blocking(_calls, primary)
    before = yield blocking(_real, primary)
    obs = yield _observe(reactor, topo, primary, kind)
    after = yield blocking(_real, primary)
    assert (yield blocking(_calls, primary)) == calls
    assert obs.in_recovery is False
    assert before["wal"] <= obs.wal_lsn <= after["wal"], (before, obs, after)
    assert obs.wal_lsn <= obs.insert_lsn
    assert obs.timeline == after["timeline"]
    assert abs(obs.server_now - time.time()) < 60, obs
    assert (obs.wal_block_size, obs.wal_segment_size) == after["geometry"]

    before = yield blocking(_real, replica)
    obs = yield _observe(reactor, topo, replica, kind)
    after = yield blocking(_real, replica)
    assert obs.in_recovery is True
    monitor = ROLES[kind][1]
    positions = [("replay", obs.replay_lsn), ("receive", obs.receive_lsn)]
    if monitor:
        positions.append(("latest_end", obs.latest_end_lsn))
    else:
        assert obs.latest_end_lsn is None
    for field, observed in positions:
        assert before[field] <= observed <= after[field], (field, before, obs, after)
    assert obs.replay_ts == after["replay_ts"]
    assert obs.timeline == after["timeline"]
    assert abs(obs.server_now - time.time()) < 60, obs
    assert (obs.wal_block_size, obs.wal_segment_size) == after["geometry"]


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("kind", list(ROLES))
def test_reduced_status_queries_see_through_shadowing_schema(shadowed, kind, level):
    """
    The status query without the WAL receiver statistics (level 1) and
    without the control-file functions too (level 2), which the probe falls
    back to for roles refused those, run as the role: on every node, the
    same row as for the superuser, whose search_path is the default (the
    clock aside, which must be the real one too), and no shadowing
    function called.
    """
    topo = shadowed
    _assert_trap_works(topo, kind)
    query = status_query(level)
    calls = _calls(topo.primary)
    for node in topo.nodes:
        before = node.sql(query)
        conn = node.connect(user=_role(kind), password=PASSWORD)
        try:
            with conn.cursor() as cur:
                cur.execute(query)
                rows = cur.fetchall()
        finally:
            conn.close()
        after = node.sql(query)
        assert len(rows) == 1
        row = rows[0]
        assert abs(row[1] - time.time()) < 60, row
        assert row[:1] + row[2:] in {r[:1] + r[2:] for r in before + after}, (before, row, after)
    assert _calls(topo.primary) == calls


@pytest_twisted.inlineCallbacks
def test_service_names_the_real_master(shadowed, service, reactor):
    """
    The service, logged in to every node as the role with all the
    shadowing schemas first: ``/master`` is the primary; ``/replica`` with
    the real timeline is a replica (with another timeline, or none known,
    it would answer the master); ``/hosts`` shows every node's real WAL
    position.
    """
    topo = shadowed
    yield blocking(_assert_trap_works, topo, "all")
    primary = topo.primary
    svc = service({**topo.hosts_env(user=_role("all"), password=PASSWORD),
                   "pg_status__sleep_ms": "200", "pg_status__query_timeout_ms": "2000"})
    calls = yield blocking(_calls, primary)
    yield wait_until(reactor, ready(svc), 10, "readiness")
    before = {}
    for node in topo.nodes:
        before[node.host] = yield blocking(_real, node)
    r = yield svc.get("/master")
    assert (r.code, r.text) == (200, primary.host)
    timeline = before[primary.host]["timeline"]
    r = yield svc.get(f"/replica?timeline={timeline}")
    assert r.code == 200 and r.text in {n.host for n in topo.replicas}, r

    def position(real: dict[str, Any]) -> int:
        return real["replay"] if real["recovery"] else real["wal"]

    def rows_since_before() -> Any:
        d = svc.get("/hosts", json_=True)
        return d.addCallback(lambda a: {x["host"]: x for x in a.json()} if all(
            x["lsn"] is not None and lsn_to_int(x["lsn"]) >= position(before[x["host"]])
            for x in a.json()) else None)

    rows, _ = yield wait_until(reactor, rows_since_before, 5, "every row after the reading")
    for node in topo.nodes:
        after = yield blocking(_real, node)
        row = rows[node.host]
        assert row["master"] is (node is primary), row
        assert lsn_to_int(row["lsn"]) <= position(after), (row, after)
    assert (yield blocking(_calls, primary)) == calls


def test_write_position_sees_through_shadowing_schemas(shadowed):
    """
    ``write_position`` on a connection of the role with all the shadowing
    schemas first returns the primary's real insert position and timeline.
    """
    topo = shadowed
    _assert_trap_works(topo, "all")
    primary = topo.primary
    calls = _calls(primary)
    lsn_before = lsn_to_int(primary.value("SELECT pg_current_wal_insert_lsn()::text"))
    conn = primary.connect(user=_role("all"), password=PASSWORD)
    try:
        with conn.cursor() as cur:
            position = write_position(cur)
    finally:
        conn.close()
    lsn_after = lsn_to_int(primary.value("SELECT pg_current_wal_insert_lsn()::text"))
    assert lsn_before <= lsn_to_int(position.lsn) <= lsn_after
    assert position.timeline == primary.timeline()
    assert _calls(primary) == calls
