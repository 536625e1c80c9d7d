"""
Tests for :mod:`pgstatus.monitor.lag`: ``lag_bytes``, the commit age with its
clock-skew correction, the ``lag_ms`` bound and master positions.

Times are plain floats (seconds); no clock is read.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgstatus.monitor.lag import (
    MasterPosition,
    Observation,
    commit_age_ms,
    lag_bytes,
    lag_ms,
    page_header,
    past_header,
    timelines_differ,
)

#: local time of the replica check's round trip: sent at T, answered 20 ms later
T = 1_000_000.0
RTT = 0.02


def replica_obs(
    *,
    replay_lsn: int | None = 1000,
    receive_lsn: int | None = None,
    latest_end_lsn: int | None = None,
    timeline: int | None = 1,
    replay_ts: float | None = None,
    offset: float = 0.0,
    rtt: float = RTT,
    started: float = T,
) -> Observation:
    """
    A replica's observation whose server clock is ``offset`` seconds ahead
    of the local clock (negative: behind), measured over ``rtt``.
    """
    sent = started
    received = sent + rtt
    return Observation(
        started=started,
        sent=sent,
        received=received,
        server_now=(sent + received) / 2 + offset,
        in_recovery=True,
        timeline=timeline,
        replay_lsn=replay_lsn,
        receive_lsn=receive_lsn,
        latest_end_lsn=latest_end_lsn,
        replay_ts=replay_ts,
    )


def position(
    lsn: int = 1000,
    *,
    timeline: int | None = 1,
    unwritten: bool = False,
    check_started: float = T - 0.5,
    clock_offset: float = 0.0,
    accuracy: float = RTT / 2,
) -> MasterPosition:
    """
    A master position; by default its check started 500 ms before ``T``
    and its clock agrees with the local one.
    """
    return MasterPosition(lsn=lsn, unwritten=unwritten, timeline=timeline,
                          check_started=check_started, clock_offset=clock_offset,
                          accuracy=accuracy)


# ---------------------------------------------------------------------------
# Observation


def test_observation_clock_offset_and_accuracy():
    """
    The server clock is compared with the midpoint of the round trip; the
    accuracy is half the round trip.
    """
    obs = Observation(started=9.0, sent=10.0, received=10.5, server_now=110.25,
                      in_recovery=False)
    assert obs.clock_offset == pytest.approx(100.0)
    assert obs.accuracy == pytest.approx(0.25)


def test_observation_accuracy_never_negative():
    """
    A local clock that stepped backwards during the query gives accuracy 0,
    not a negative one.
    """
    obs = Observation(started=0, sent=10.0, received=9.0, server_now=0, in_recovery=False)
    assert obs.accuracy == 0.0


# ---------------------------------------------------------------------------
# lag_bytes


@pytest.mark.parametrize(
    ("master_lsn", "receive", "end", "replay", "expected"),
    [
        pytest.param(1000, None, None, 900, 100, id="master-only"),
        pytest.param(1000, 1500, None, 900, 600, id="received-ahead-of-master"),
        pytest.param(1000, None, 2000, 900, 1100, id="latest-end-ahead"),
        pytest.param(3000, 1500, 2000, 900, 2100, id="master-ahead"),
        pytest.param(1000, 1000, 1000, 1000, 0, id="caught-up"),
        pytest.param(1000, 1000, None, 1200, 0, id="replay-ahead-clamped"),
        pytest.param(None, 1000, None, 400, 600, id="no-master-received"),
        pytest.param(None, None, 1000, 400, 600, id="no-master-latest-end"),
        pytest.param(None, None, None, 400, None, id="nothing-to-compare"),
        pytest.param(1000, None, None, None, None, id="replay-unknown"),
        pytest.param((5 << 32) + 10, None, None, (4 << 32) + 20, (1 << 32) - 10,
                     id="across-high-word"),
    ],
)
def test_lag_bytes(master_lsn, receive, end, replay, expected):
    """
    ``max(0, max(master_lsn, received_lsn, latest_end_lsn) - replay_lsn)``,
    unknown when there is nothing to compare with.
    """
    obs = replica_obs(replay_lsn=replay, receive_lsn=receive, latest_end_lsn=end)
    master = None if master_lsn is None else position(master_lsn)
    assert lag_bytes(obs, master) == expected


@pytest.mark.parametrize(
    ("replica_tl", "master_tl", "expected"),
    [
        pytest.param(2, 2, 100, id="same"),
        pytest.param(1, 2, None, id="replica-behind"),
        pytest.param(3, 2, None, id="replica-ahead"),
        pytest.param(None, 2, 100, id="replica-unknown"),
        pytest.param(2, None, 100, id="master-unknown"),
        pytest.param(None, None, 100, id="both-unknown"),
    ],
)
def test_lag_bytes_timelines(replica_tl, master_tl, expected):
    """
    lag_bytes is unknown when the replica's timeline differs from the
    master's; unknown timelines are not a difference.
    """
    obs = replica_obs(replay_lsn=900, receive_lsn=950, timeline=replica_tl)
    assert lag_bytes(obs, position(1000, timeline=master_tl)) == expected


def test_lag_bytes_no_master_ignores_replica_timeline():
    """
    With no master ever seen, the receiver's positions alone count, on any
    timeline.
    """
    obs = replica_obs(replay_lsn=900, receive_lsn=1000, timeline=7)
    assert lag_bytes(obs, None) == 100


_lsn = st.integers(0, 2**64 - 1)
_opt_lsn = st.one_of(st.none(), _lsn)


@given(_opt_lsn, _opt_lsn, _opt_lsn, _lsn)
def test_lag_bytes_formula(master_lsn, receive, end, replay):
    """
    For any positions, lag_bytes is the specification's formula over the
    known ones, never negative.
    """
    obs = replica_obs(replay_lsn=replay, receive_lsn=receive, latest_end_lsn=end)
    master = None if master_lsn is None else position(master_lsn)
    known = [v for v in (master_lsn, receive, end) if v is not None]
    got = lag_bytes(obs, master)
    if not known:
        assert got is None
    else:
        assert got == max(0, max(known) - replay)
        assert got >= 0


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [(1, 1, False), (1, 2, True), (None, 2, False), (2, None, False), (None, None, False)],
)
def test_timelines_differ(a, b, expected):
    """
    Timelines differ only when both are known and unequal.
    """
    assert timelines_differ(a, b) is expected


# ---------------------------------------------------------------------------
# commit age


def test_commit_age_unknown_before_first_replayed_transaction():
    """
    Until the replica replays a transaction the age is unknown.
    """
    assert commit_age_ms(replica_obs(replay_ts=None), position()) is None
    assert commit_age_ms(replica_obs(replay_ts=None), None) is None


@pytest.mark.parametrize("master", [None, position()], ids=["no-master", "master"])
def test_commit_age_clocks_agree(master):
    """
    With agreeing clocks the age is the replica's now minus the replay
    timestamp, in milliseconds.
    """
    mid = T + RTT / 2
    obs = replica_obs(replay_ts=mid - 1.5)
    assert commit_age_ms(obs, master) == 1500


def test_commit_age_replica_behind_is_corrected():
    """
    A replica clock 5 s behind the master's (far more than the combined
    accuracy) is corrected: the age is the true 1.5 s, not 0.
    """
    mid = T + RTT / 2
    # the transaction committed 1.5 s ago by the master's (= local) clock
    obs = replica_obs(replay_ts=mid - 1.5, offset=-5.0)
    assert commit_age_ms(obs, position(clock_offset=0.0)) == 1500


def test_commit_age_correction_relative_to_master_clock():
    """
    The correction uses the difference between both clocks, not either
    clock against the local one.
    """
    mid = T + RTT / 2
    # master clock +10 s, replica clock +7 s: replica 3 s behind the master
    obs = replica_obs(replay_ts=mid + 10.0 - 2.0, offset=7.0)
    assert commit_age_ms(obs, position(clock_offset=10.0)) == 2000


def test_commit_age_replica_ahead_is_not_corrected():
    """
    A replica clock 5 s ahead of the master's makes the age 5 s larger.
    """
    mid = T + RTT / 2
    obs = replica_obs(replay_ts=mid - 1.5, offset=5.0)
    assert commit_age_ms(obs, position(clock_offset=0.0)) == 6500


@pytest.mark.parametrize(
    ("behind", "master_acc", "replica_rtt", "corrected"),
    [
        pytest.param(0.015, 0.01, 0.02, False, id="within-combined-accuracy"),
        pytest.param(0.019, 0.01, 0.02, False, id="just-within"),
        pytest.param(0.025, 0.01, 0.02, True, id="beyond-combined-accuracy"),
        pytest.param(0.015, 0.0, 0.0, True, id="beyond-zero-accuracy"),
        pytest.param(0.5, 0.3, 0.5, False, id="large-accuracy"),
    ],
)
def test_commit_age_correction_threshold(behind, master_acc, replica_rtt, corrected):
    """
    The age is corrected only when the replica is behind by more than the
    accuracy of both measurements together (master's plus replica's half
    round trip).
    """
    obs = replica_obs(replay_ts=T + 5.0, offset=-behind + 10.0, rtt=replica_rtt)
    master = position(clock_offset=10.0, accuracy=master_acc)
    raw = obs.server_now - obs.replay_ts
    expected = raw + behind if corrected else raw
    assert commit_age_ms(obs, master) == max(0, round(expected * 1000))


def test_commit_age_never_negative():
    """
    A replay timestamp in the replica clock's future gives age 0.
    """
    mid = T + RTT / 2
    assert commit_age_ms(replica_obs(replay_ts=mid + 3.0), None) == 0


# ---------------------------------------------------------------------------
# lag_ms


def _bounded_obs(**kw) -> Observation:
    """
    A replica at the master's position 1000 on timeline 1 whose last
    replayed transaction is 10 s old.
    """
    kw.setdefault("replay_lsn", 1000)
    kw.setdefault("timeline", 1)
    kw.setdefault("replay_ts", T + RTT / 2 - 10.0)
    return replica_obs(**kw)


def test_lag_ms_bounded_by_time_since_master_check():
    """
    At exactly the master's last position, same timeline, check ok and no
    unwritten WAL: ``min(commit_age, now - master check start)``.
    """
    now = T + 0.1
    master = position(1000, check_started=now - 0.3)
    assert lag_ms(_bounded_obs(), master, True, now) == 300


def test_lag_ms_commit_age_smaller_than_bound():
    """
    With frequent commits the commit age is the smaller value.
    """
    now = T + 0.1
    obs = _bounded_obs(replay_ts=T + RTT / 2 - 0.05)
    assert lag_ms(obs, position(1000, check_started=now - 0.3), True, now) == 50


@pytest.mark.parametrize(
    ("obs_kw", "master", "check_ok"),
    [
        pytest.param({}, None, True, id="no-master-selected"),
        pytest.param({}, position(1000), False, id="master-check-failed"),
        pytest.param({}, position(1000, unwritten=True), True, id="unwritten-wal"),
        pytest.param({"replay_lsn": 999}, position(1000), True, id="replica-behind"),
        pytest.param({"replay_lsn": 1001}, position(1000), True, id="replica-ahead"),
        pytest.param({"replay_lsn": None}, position(1000), True, id="replay-unknown"),
        pytest.param({"timeline": 2}, position(1000, timeline=1), True,
                     id="timeline-differs"),
        # the lead's interpretation: an unknown timeline is not "the same"
        pytest.param({"timeline": None}, position(1000, timeline=1), True,
                     id="replica-timeline-unknown"),
        pytest.param({}, position(1000, timeline=None), True, id="master-timeline-unknown"),
    ],
)
def test_lag_ms_commit_age_alone_when_bound_does_not_apply(obs_kw, master, check_ok):
    """
    Without a selected master, after a failed master check, with unwritten
    WAL, at another position or on another (or unknown) timeline, lag_ms is
    the commit age alone.

    Unknown timelines: the spec lists only min_lsn and byte thresholds as
    what a replica on an abandoned history can still meet when timelines
    are unknown, so the bound is not applied then (lead's interpretation).
    """
    now = T + 0.1
    obs = _bounded_obs(**obs_kw)
    assert lag_ms(obs, master, check_ok, now) == commit_age_ms(obs, master) == 10000


def test_lag_ms_unknown_commit_age_with_bound_is_bound():
    """
    The lead's interpretation: a caught-up replica that has not replayed a
    transaction since it started has an unknown commit age, and its lag_ms
    is then the bound alone (it has nothing left to replay).
    """
    now = T + 0.1
    obs = _bounded_obs(replay_ts=None)
    assert lag_ms(obs, position(1000, check_started=now - 0.25), True, now) == 250


def test_lag_ms_unknown_without_bound():
    """
    Unknown commit age and no bound: lag_ms is unknown.
    """
    now = T + 0.1
    obs = _bounded_obs(replay_ts=None, replay_lsn=900)
    assert lag_ms(obs, position(1000), True, now) is None
    assert lag_ms(_bounded_obs(replay_ts=None), None, True, now) is None


def test_lag_ms_bound_never_negative():
    """
    A master check that started "after" now (clock steps) bounds at 0.
    """
    now = T + 0.1
    assert lag_ms(_bounded_obs(), position(1000, check_started=now + 1), True, now) == 0


@given(st.floats(0, 100), st.floats(0, 100))
def test_lag_ms_bound_is_min(age_s, since_s):
    """
    When the bound applies, lag_ms is the smaller of the commit age and the
    time since the master's check started.
    """
    now = T + 0.1
    obs = _bounded_obs(replay_ts=obs_mid() - age_s)
    master = position(1000, check_started=now - since_s)
    got = lag_ms(obs, master, True, now)
    age = commit_age_ms(obs, master)
    bound = max(0, round((now - master.check_started) * 1000))
    assert got == min(age, bound)


def obs_mid() -> float:
    """
    The replica server clock's reading at the midpoint (offset 0).
    """
    return T + RTT / 2


# ---------------------------------------------------------------------------
# MasterPosition.from_observation


def _master_obs(**kw) -> Observation:
    base = dict(started=T - 0.01, sent=T, received=T + 0.04, server_now=T + 0.02 + 3.0,
                in_recovery=False, wal_lsn=5000, insert_lsn=5000, timeline=4)
    base.update(kw)
    return Observation(**base)


@pytest.mark.parametrize(
    ("wal", "insert", "unwritten"),
    [
        pytest.param(5000, 5000, False, id="all-written"),
        pytest.param(5000, 5008, True, id="insert-ahead"),
        pytest.param(5000, None, False, id="insert-unknown"),
        pytest.param(5000, 4000, False, id="insert-behind"),
    ],
)
def test_master_position_unwritten(wal, insert, unwritten):
    """
    ``unwritten`` is set when the insert position is ahead of the write
    position.
    """
    pos = MasterPosition.from_observation(_master_obs(wal_lsn=wal, insert_lsn=insert))
    assert pos is not None
    assert pos.unwritten is unwritten


def test_master_position_fields():
    """
    The position carries the host, LSN, timeline, the check's start and
    the master's clock offset and accuracy.
    """
    obs = _master_obs()
    pos = MasterPosition.from_observation(obs)
    assert pos == MasterPosition(lsn=5000, unwritten=False, timeline=4,
                                 check_started=T - 0.01, clock_offset=obs.clock_offset,
                                 accuracy=obs.accuracy)
    assert pos.clock_offset == pytest.approx(3.0)
    assert pos.accuracy == pytest.approx(0.02)


def test_master_position_without_lsn():
    """
    An observation without ``pg_current_wal_lsn()`` gives no position.
    """
    assert MasterPosition.from_observation(_master_obs(wal_lsn=None)) is None


def test_master_with_unwritten_wal_disables_bound_end_to_end():
    """
    From the master's observation to a replica's lag_ms: unwritten WAL on
    the master removes the bound.
    """
    now = T + 1.0
    pos = MasterPosition.from_observation(_master_obs(wal_lsn=1000, insert_lsn=1100,
                                                         timeline=1))
    obs = _bounded_obs()
    assert lag_ms(obs, pos, True, now) == commit_age_ms(obs, pos)
    pos = MasterPosition.from_observation(_master_obs(wal_lsn=1000, insert_lsn=1000,
                                                         timeline=1))
    assert lag_ms(obs, pos, True, now) < commit_age_ms(obs, pos)


# ---------------------------------------------------------------------------
# WAL page headers

BLOCK = 8192
SEGMENT = 16 * 1024 * 1024
SEG4 = 4 * SEGMENT  # 0/4000000


@pytest.mark.parametrize(
    ("lsn", "expected"),
    [
        pytest.param(SEG4, SEG4 + 40, id="segment-start"),
        pytest.param(SEG4 + 40, SEG4 + 40, id="after-long-header"),
        pytest.param(SEG4 + 17, SEG4 + 40, id="inside-long-header"),
        pytest.param(SEG4 + 41, SEG4 + 41, id="past-long-header"),
        pytest.param(SEG4 + BLOCK, SEG4 + BLOCK + 24, id="page-start"),
        pytest.param(SEG4 + BLOCK + 24, SEG4 + BLOCK + 24, id="after-short-header"),
        pytest.param(SEG4 + BLOCK + 23, SEG4 + BLOCK + 24, id="inside-short-header"),
        pytest.param(SEG4 + 2 * BLOCK - 1, SEG4 + 2 * BLOCK - 1, id="page-end"),
        pytest.param(0, 40, id="zero"),
    ],
)
def test_past_header(lsn, expected):
    """
    A position at a page boundary or inside its header is moved past the
    header: 40 bytes on a segment's first page, 24 on the others.
    """
    assert past_header(lsn, BLOCK, SEGMENT) == expected


def test_past_header_other_geometry():
    """
    The sizes come from the server: with 32 KiB pages and 1 MiB segments
    the boundaries move accordingly.
    """
    block, segment = 32768, 1 << 20
    assert past_header(3 * segment, block, segment) == 3 * segment + 40
    assert past_header(3 * segment + block, block, segment) == 3 * segment + block + 24
    assert past_header(3 * segment + 8192, block, segment) == 3 * segment + 8192
    assert page_header(3 * segment + block + 5, block, segment) == (3 * segment + block, 24)


@pytest.mark.parametrize(("block", "segment"), [(None, None), (BLOCK, None), (None, SEGMENT)])
def test_past_header_unknown_geometry(block, segment):
    """
    Without the server's sizes, positions are compared as they are.
    """
    assert past_header(SEG4, block, segment) == SEG4


@given(st.integers(min_value=0, max_value=2**40), st.sampled_from([8192, 16384, 32768]),
       st.sampled_from([1 << 20, 16 << 20, 1 << 30]))
def test_past_header_properties(lsn, block, segment):
    """
    Never moves backwards, moves at most one header, lands right after the
    header of the page it was on, and is idempotent.
    """
    out = past_header(lsn, block, segment)
    start, size = page_header(lsn, block, segment)
    assert lsn <= out <= lsn + 40
    assert out == lsn or out == start + size
    assert past_header(out, block, segment) == out


def test_master_at_segment_start_has_no_unwritten_wal():
    """
    After a WAL switch on an idle master, the insert position is the write
    position plus the new segment's long header: no unwritten WAL, and a
    replica at the boundary gets the bound.
    """
    geometry = dict(wal_block_size=BLOCK, wal_segment_size=SEGMENT)
    pos = MasterPosition.from_observation(_master_obs(
        wal_lsn=SEG4, insert_lsn=SEG4 + 40, timeline=1, **geometry))
    assert pos.unwritten is False
    obs = Observation(started=T, sent=T, received=T + RTT, server_now=T + RTT / 2,
                      in_recovery=True, timeline=1, replay_lsn=SEG4, **geometry)
    assert lag_ms(obs, pos, True, T + 0.1) == round((T + 0.1 - pos.check_started) * 1000)
    # one byte of a record after the header is unwritten WAL
    pos = MasterPosition.from_observation(_master_obs(
        wal_lsn=SEG4, insert_lsn=SEG4 + 41, timeline=1, **geometry))
    assert pos.unwritten is True
    assert lag_ms(obs, pos, True, T + 0.1) is None
    # without the geometry, nothing is discounted
    pos = MasterPosition.from_observation(_master_obs(
        wal_lsn=SEG4, insert_lsn=SEG4 + 40, timeline=1))
    assert pos.unwritten is True


def test_master_position_at_page_boundary_matches_replica_past_header():
    """
    The equality behind the bound treats the two spellings of a boundary
    as one position, whichever side has which.
    """
    geometry = dict(wal_block_size=BLOCK, wal_segment_size=SEGMENT)
    pos = MasterPosition.from_observation(_master_obs(
        wal_lsn=SEG4 + BLOCK + 24, insert_lsn=SEG4 + BLOCK + 24, timeline=1, **geometry))
    obs = Observation(started=T, sent=T, received=T + RTT, server_now=T + RTT / 2,
                      in_recovery=True, timeline=1, replay_lsn=SEG4 + BLOCK, **geometry)
    assert lag_ms(obs, pos, True, T + 0.1) is not None
