"""
The status row's values are checked before they are believed
(:func:`pgstatus.monitor.query.observation_from_row`): each invalid value is
a ``ValueError`` naming the field and the value, which the probe turns into
a failed check (``operation=validate_result``).  The rows here are Python
values as psycopg2 parses them from the server's text (``-Infinity`` and
``NaN`` float8 are ``float('-inf')`` and ``float('nan')``); the same rows
sent over the wire are in ``test_bad_values.py``.
"""

from __future__ import annotations

import math
import time

import pytest

from pgstatus.monitor.query import observation_from_row

NOW = time.time()
#: in recovery, clock, 3 master-only NULLs, replay and receive positions,
#: replay timestamp, upstream WAL end, receiver and control-file timelines
REPLICA = (True, NOW, None, None, None, 0x3000060, 0x3000060, NOW - 0.1, 0x3000060, 2, 2)
MASTER = (False, NOW, 0x3000060, 0x3000060, 1, None, None, None, None, None, None)


def parse(row: tuple):
    return observation_from_row(row, NOW, NOW, NOW, (8192, 16 * 2**20))


def with_(row: tuple, index: int, value: object) -> tuple:
    return row[:index] + (value,) + row[index + 1:]


def test_valid_rows() -> None:
    obs = parse(REPLICA)
    assert (obs.in_recovery, obs.replay_lsn, obs.timeline, obs.replay_ts) == \
        (True, 0x3000060, 2, NOW - 0.1)
    obs = parse(MASTER)
    assert (obs.in_recovery, obs.wal_lsn, obs.timeline) == (False, 0x3000060, 1)
    # the extremes that are valid
    assert parse(with_(REPLICA, 5, 2**64 - 1)).replay_lsn == 2**64 - 1
    assert parse(with_(REPLICA, 9, 2**32 - 1)).timeline == 2**32 - 1
    assert parse(with_(REPLICA, 7, None)).replay_ts is None
    assert parse(with_(REPLICA, 7, -210866803200.0)).replay_ts == -210866803200.0


def test_receiver_timeline_zero_is_unknown() -> None:
    """
    ``pg_stat_wal_receiver.received_tli`` is not NULL but 0 before the
    receiver has a timeline: the control file's timeline is used, as
    when the receiver statistics are not visible.
    """
    assert parse(with_(with_(REPLICA, 9, 0), 10, 3)).timeline == 3
    assert parse(with_(with_(REPLICA, 9, None), 10, 3)).timeline == 3
    assert parse(with_(with_(REPLICA, 9, 0), 10, None)).timeline is None


BAD = [
    # (row, index, value, words in the message)
    (REPLICA, 7, -math.inf, ("replay_ts", "not a finite time")),
    (REPLICA, 7, math.inf, ("replay_ts", "not a finite time")),
    (REPLICA, 7, math.nan, ("replay_ts", "not a finite time")),
    (REPLICA, 7, 1e300, ("replay_ts", "outside PostgreSQL's timestamp range")),
    (REPLICA, 7, 9224318016000.0, ("replay_ts", "outside PostgreSQL's timestamp range")),
    (REPLICA, 7, "1.5", ("replay_ts", "not a number")),
    (REPLICA, 1, None, ("server_now", "missing")),
    (REPLICA, 1, math.nan, ("server_now", "not a finite time")),
    (MASTER, 1, -math.inf, ("server_now", "not a finite time")),
    (REPLICA, 0, 1, ("in_recovery", "not a boolean")),
    (REPLICA, 0, "t", ("in_recovery", "not a boolean")),
    (REPLICA, 0, None, ("in_recovery", "not a boolean")),
    (REPLICA, 5, -1, ("replay_lsn", "not a WAL position")),
    (REPLICA, 5, 2**64, ("replay_lsn", "not a WAL position")),
    (REPLICA, 5, 1.0, ("replay_lsn", "not an integer")),
    (REPLICA, 5, True, ("replay_lsn", "not an integer")),
    (REPLICA, 6, -5, ("receive_lsn", "not a WAL position")),
    (REPLICA, 8, 2**70, ("latest_end_lsn", "not a WAL position")),
    (REPLICA, 9, -1, ("received_tli", "not a timeline")),
    (REPLICA, 9, 2**32, ("received_tli", "not a timeline")),
    (with_(REPLICA, 9, None), 10, 0, ("timeline_id", "not a timeline")),
    (MASTER, 2, -1, ("wal_lsn", "not a WAL position")),
    (MASTER, 2, None, ("wal_lsn", "missing")),
    (MASTER, 3, 2**64, ("insert_lsn", "not a WAL position")),
    (MASTER, 4, 0, ("timeline", "not a timeline")),
    (MASTER, 4, 2**32, ("timeline", "not a timeline")),
]


@pytest.mark.parametrize("row,index,value,words", BAD)
def test_invalid_value_names_the_field(row, index, value, words) -> None:
    with pytest.raises(ValueError) as e:
        parse(with_(row, index, value))
    message = str(e.value)
    assert message.startswith("invalid "), message
    for w in words:
        assert w in message, message


def test_wrong_width() -> None:
    with pytest.raises(ValueError, match="10 columns instead of 11"):
        parse(REPLICA[:10])
