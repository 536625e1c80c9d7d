"""
The status query and what its answers mean: the one round trip that
measures role, positions and clocks, the WAL geometry asked once per
connection, and the parsing of both into an :class:`Observation`.

Pure: no connection, no reactor.
"""

from __future__ import annotations

from typing import Any

from pgstatus.monitor import values
from pgstatus.monitor.lag import Observation

#: the WAL receiver's part; ``from pg_catalog.pg_stat_wal_receiver`` is
#: written in lower case as the original service writes it, so tools that
#: find the poll query in ``pg_stat_activity`` by that text find ours too
_RECEIVER = (
    "(SELECT pg_catalog.pg_wal_lsn_diff(latest_end_lsn, '0/0')::pg_catalog.int8"
    " from pg_catalog.pg_stat_wal_receiver)",
    "(SELECT received_tli::pg_catalog.int8 from pg_catalog.pg_stat_wal_receiver)",
)
_CONTROL = ("CASE WHEN r.rec THEN (SELECT timeline_id::pg_catalog.int8"
            " FROM pg_catalog.pg_control_checkpoint()) END")
_NULL = "NULL::pg_catalog.int8"


def status_query(level: int) -> str:
    """
    The status query.  ``level`` 0 is complete; 1 leaves out the WAL
    receiver statistics; 2 also leaves out the control-file functions.

    Every function, relation, type and operator it names is qualified with
    ``pg_catalog`` (as is :data:`GEOMETRY_QUERY`), so a monitoring role
    whose ``search_path`` puts another schema first cannot have that
    schema's objects answer in their place (CVE-2018-1058).  ``extract``,
    ``CASE`` and ``bit(n)`` are keyword syntax, which the server resolves
    in ``pg_catalog`` whatever the ``search_path``.
    """
    latest_end, received_tli = _RECEIVER if level < 1 else (_NULL, _NULL)
    control = _CONTROL if level < 2 else _NULL
    return f"""SELECT r.rec,
  extract(epoch FROM pg_catalog.clock_timestamp())::pg_catalog.float8,
  CASE WHEN r.rec THEN NULL ELSE
    pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), '0/0')::pg_catalog.int8 END,
  CASE WHEN r.rec THEN NULL ELSE
    pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_insert_lsn(), '0/0')::pg_catalog.int8 END,
  CASE WHEN r.rec THEN NULL ELSE
    ('x' OPERATOR(pg_catalog.||)
     pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
    ::pg_catalog.bit(32)::pg_catalog.int8 END,
  pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_last_wal_replay_lsn(), '0/0')::pg_catalog.int8,
  pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_last_wal_receive_lsn(), '0/0')::pg_catalog.int8,
  extract(epoch FROM pg_catalog.pg_last_xact_replay_timestamp())::pg_catalog.float8,
  {latest_end},
  {received_tli},
  {control}
FROM (SELECT pg_catalog.pg_is_in_recovery() AS rec) AS r"""


#: the server's WAL geometry, asked once per connection (positions are
#: compared with page headers discounted, see :func:`pgstatus.monitor.lag.past_header`);
#: qualified with ``pg_catalog`` throughout, as the status query is
GEOMETRY_QUERY = """SELECT pg_catalog.current_setting('wal_block_size')::pg_catalog.int8,
  (SELECT setting::pg_catalog.int8 FROM pg_catalog.pg_settings
   WHERE name OPERATOR(pg_catalog.=) 'wal_segment_size')"""


def geometry_from_rows(rows: Any) -> tuple[int, int] | None:
    """
    ``(wal_block_size, wal_segment_size)`` from :data:`GEOMETRY_QUERY`'s
    answer, or ``None`` if it is not usable.
    """
    try:
        block, segment = rows[0]
        block, segment = int(block), int(segment)
    except (IndexError, TypeError, ValueError, OverflowError):
        return None
    if block <= 0 or segment <= 0 or segment % block:
        return None
    return block, segment


def observation_from_row(row: tuple, started: float, sent: float, received: float,
                         geometry: tuple[int, int] | None = None) -> Observation:
    """
    Turn the status query's row into an :class:`Observation`, every value
    checked (see :mod:`pgstatus.monitor.values`): a boolean role, finite
    times within PostgreSQL's timestamp range, WAL positions within 64 bits,
    timelines from 1 to 2**32 - 1.  A WAL receiver timeline of 0, which
    ``pg_stat_wal_receiver`` can show before the receiver has one, counts as
    unknown: the control file's timeline is used, as without the receiver.

    :param geometry: the server's ``(wal_block_size, wal_segment_size)``.
    :raise ValueError: the row is not what the query returns, or a value is
        invalid (the message names the field and the value).
    """
    block, segment = geometry if geometry is not None else (None, None)
    if len(row) != 11:
        raise ValueError(f"unexpected status row of {len(row)} columns instead of 11: {row!r}")
    rec, now, wal, ins, mtl, replay, receive, replay_ts, latest_end, rtl, ctl = row
    rec = values.boolean("in_recovery (pg_is_in_recovery())", rec)
    server_now = values.epoch("server_now (clock_timestamp())", now, required=True)
    assert server_now is not None
    if rec:
        if type(rtl) is int and rtl == 0:
            rtl = None
        tl = values.timeline("timeline (pg_stat_wal_receiver.received_tli)", rtl)
        if tl is None:
            tl = values.timeline("timeline (pg_control_checkpoint().timeline_id)", ctl)
        return Observation(
            started, sent, received, server_now, True,
            timeline=tl,
            control_timeline=rtl is None and tl is not None,
            replay_lsn=values.lsn("replay_lsn (pg_last_wal_replay_lsn())", replay),
            receive_lsn=values.lsn("receive_lsn (pg_last_wal_receive_lsn())", receive),
            latest_end_lsn=values.lsn("latest_end_lsn (pg_stat_wal_receiver.latest_end_lsn)",
                                      latest_end),
            replay_ts=values.epoch("replay_ts (pg_last_xact_replay_timestamp())", replay_ts),
            wal_block_size=block, wal_segment_size=segment,
        )
    if wal is None:
        raise ValueError("invalid wal_lsn (pg_current_wal_lsn()): missing (NULL) on a master")
    return Observation(
        started, sent, received, server_now, False,
        wal_lsn=values.lsn("wal_lsn (pg_current_wal_lsn())", wal),
        insert_lsn=values.lsn("insert_lsn (pg_current_wal_insert_lsn())", ins),
        timeline=values.timeline("timeline (pg_walfile_name(pg_current_wal_lsn()))", mtl),
        wal_block_size=block, wal_segment_size=segment,
    )
