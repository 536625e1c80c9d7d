"""
The read-your-writes helper for psycopg2: the master's WAL position and
timeline after a committed write, to pass to the next read
(``/replica?min_lsn=...&timeline=...``).  Re-exported by
:mod:`pgstatus.client`, whose requests take them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["WRITE_POSITION_SQL", "WritePosition", "write_position"]


class WritePosition(NamedTuple):
    """
    The master's WAL insert position and timeline after a committed write:
    pass both to the next read (``min_lsn``, ``timeline``).
    """

    lsn: str
    timeline: int


#: the specification's query: the insert position, and the timeline from the
#: first 8 hex digits of its WAL file name; every name is qualified with
#: ``pg_catalog``, so that no schema earlier in the connection's
#: ``search_path`` can answer in its place (CVE-2018-1058)
WRITE_POSITION_SQL = (
    "SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text,"
    " ('x' OPERATOR(pg_catalog.||) pg_catalog.substr("
    "pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8))"
    "::pg_catalog.bit(32)::pg_catalog.int8"
)

_TRANSACTION_IDLE = 0  # psycopg2.extensions.TRANSACTION_STATUS_IDLE


def write_position(cursor: Any) -> WritePosition:
    """
    The master's WAL position and timeline to read a committed write back
    from a replica: ``replica(min_lsn=lsn, timeline=timeline)``.

    Call it on a cursor of the master's connection **after COMMIT has
    returned** (or, in autocommit mode, after the writing statement), never
    inside the writing transaction: before the commit, the position does not
    cover the commit record, and a replica that has replayed that far may
    not show the write yet.  With Python DB-API's implicit transactions this
    means after ``connection.commit()``.  A connection that is inside a
    transaction is refused with :class:`RuntimeError`.

    It reads ``pg_current_wal_insert_lsn()`` (``pg_current_wal_lsn()`` may
    not cover an asynchronous commit) and takes the timeline from the WAL
    file name of that position (``pg_control_checkpoint()`` shows the old
    timeline for a while after a promotion).  Outside autocommit, the
    transaction its query opened is rolled back, so the connection is left
    idle as it was found.

    :param cursor: a psycopg2 cursor on the master.
    :return: ``(lsn, timeline)``, e.g. ``("0/3000060", 2)``.
    """
    conn = cursor.connection
    if conn.info.transaction_status != _TRANSACTION_IDLE:
        raise RuntimeError(
            "write_position() must run after COMMIT has returned: the connection is inside "
            "a transaction, whose commit the position would not cover")
    try:
        cursor.execute(WRITE_POSITION_SQL)
        lsn, timeline = cursor.fetchone()
    finally:
        if not conn.autocommit:
            conn.rollback()
    return WritePosition(str(lsn), int(timeline))
