"""
Lag arithmetic: pure functions from observations to ``lag_ms`` and
``lag_bytes``, as the specification defines them.

Times are seconds as floats: ``local`` values come from the service's
clock, ``server`` values from a PostgreSQL server's clock.  The two are
related through the midpoint of the round trip that measured them.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace


@dataclass(frozen=True, slots=True)
class Observation:
    """
    What one successful status query returned, with the local times around
    it.  The fields after ``in_recovery``, which depend on the role, are
    keyword-only.

    :ivar started: local time the check started (before any connecting).
    :ivar sent: local time the status query was sent.
    :ivar received: local time its answer arrived.
    :ivar server_now: the server's ``clock_timestamp()`` as epoch seconds.
    :ivar in_recovery: ``pg_is_in_recovery()``.
    :ivar wal_lsn: master: ``pg_current_wal_lsn()``.
    :ivar insert_lsn: master: ``pg_current_wal_insert_lsn()``.
    :ivar timeline: master: the timeline of its current WAL file; replica:
        the WAL receiver's timeline, else the control file's.
    :ivar control_timeline: replica: ``timeline`` came from the control
        file (no WAL receiver is running, or its statistics are not read).
    :ivar replay_lsn: replica: ``pg_last_wal_replay_lsn()``.
    :ivar receive_lsn: replica: ``pg_last_wal_receive_lsn()``.
    :ivar latest_end_lsn: replica: ``pg_stat_wal_receiver.latest_end_lsn``.
    :ivar replay_ts: replica: ``pg_last_xact_replay_timestamp()`` as epoch
        seconds.
    :ivar wal_block_size: the server's WAL page size (``wal_block_size``),
        if known.
    :ivar wal_segment_size: the server's WAL segment size in bytes, if
        known.
    """

    started: float
    sent: float
    received: float
    server_now: float
    in_recovery: bool
    _: KW_ONLY
    wal_lsn: int | None = None
    insert_lsn: int | None = None
    timeline: int | None = None
    replay_lsn: int | None = None
    receive_lsn: int | None = None
    latest_end_lsn: int | None = None
    replay_ts: float | None = None
    wal_block_size: int | None = None
    wal_segment_size: int | None = None
    control_timeline: bool = False

    def past_header(self, lsn: int) -> int:
        """
        :func:`past_header` with this server's WAL geometry.
        """
        return past_header(lsn, self.wal_block_size, self.wal_segment_size)

    @property
    def clock_offset(self) -> float:
        """
        Server clock minus local clock, estimated at the round trip's
        midpoint.
        """
        return self.server_now - (self.sent + self.received) / 2

    @property
    def accuracy(self) -> float:
        """
        Half the round trip: how far :attr:`clock_offset` may be off.
        """
        return max(0.0, (self.received - self.sent) / 2)


@dataclass(frozen=True, slots=True)
class MasterPosition:
    """
    A master's position from one successful check, as replicas need it.

    :ivar lsn: ``pg_current_wal_lsn()``.
    :ivar unwritten: the master had WAL it had not written yet
        (``pg_current_wal_insert_lsn() > pg_current_wal_lsn()``, where a
        page header between the two is not WAL; see :func:`past_header`).
    :ivar timeline: the master's timeline, if known.
    :ivar check_started: local time that check started.
    :ivar clock_offset: master clock minus local clock.
    :ivar accuracy: uncertainty of ``clock_offset``.
    """

    lsn: int
    unwritten: bool
    timeline: int | None
    check_started: float
    clock_offset: float
    accuracy: float

    @classmethod
    def from_observation(cls, obs: Observation) -> MasterPosition | None:
        """
        The position a master's observation gives, or ``None`` without an
        LSN.
        """
        if obs.wal_lsn is None:
            return None
        unwritten = obs.insert_lsn is not None and obs.insert_lsn > obs.past_header(obs.wal_lsn)
        return cls(
            lsn=obs.wal_lsn, unwritten=unwritten, timeline=obs.timeline,
            check_started=obs.started, clock_offset=obs.clock_offset, accuracy=obs.accuracy,
        )


#: size of a WAL page's short header (``SizeOfXLogShortPHD``, MAXALIGNed)
SHORT_PAGE_HEADER = 24
#: size of the long header on a segment's first page (``SizeOfXLogLongPHD``)
LONG_PAGE_HEADER = 40


def page_header(lsn: int, block_size: int, segment_size: int) -> tuple[int, int]:
    """
    The start and the header size of the WAL page that ``lsn`` falls on.
    """
    start = lsn - lsn % block_size
    size = LONG_PAGE_HEADER if start % segment_size == 0 else SHORT_PAGE_HEADER
    return start, size


def past_header(lsn: int, block_size: int | None, segment_size: int | None) -> int:
    """
    ``lsn`` moved past the page header it sits at or in.

    WAL positions name the same point two ways at a page boundary: a record
    that ends there ends at the boundary (what ``pg_current_wal_lsn()`` and
    ``pg_last_wal_replay_lsn()`` show), while the next record can only start
    after the new page's header (what ``pg_current_wal_insert_lsn()`` shows,
    e.g. ``0/4000028`` right after a switch to segment ``0/4000000``).  The
    header holds no WAL, so both are one position; this returns the later
    spelling, the first byte after the header.  Positions elsewhere, and any
    position when the geometry is unknown, are returned unchanged.

    :param block_size: the server's ``wal_block_size``.
    :param segment_size: the server's ``wal_segment_size`` in bytes.
    """
    if not block_size or not segment_size:
        return lsn
    start, size = page_header(lsn, block_size, segment_size)
    return start + size if lsn - start < size else lsn


def known_timeline(obs: Observation, previous: int | None) -> Observation:
    """
    A replica's observation with its timeline as last known: when the
    timeline comes from the control file (the WAL receiver is down, as
    while its master is down) and is older than the one the host reported
    before, the earlier one stands.  The control file shows a new timeline
    only after the next restartpoint, and timelines never go back, so the
    older value says nothing new; taken as is, it differs from the
    master's and every byte lag turned unknown during a master outage.
    """
    if (obs.control_timeline and previous is not None and obs.timeline is not None
            and obs.timeline < previous):
        return replace(obs, timeline=previous)
    return obs


def timelines_differ(a: int | None, b: int | None) -> bool:
    """
    Two timelines are known and different.
    """
    return a is not None and b is not None and a != b


def lag_bytes(obs: Observation, master: MasterPosition | None) -> int | None:
    """
    ``max(0, max(master_lsn, received_lsn, latest_end_lsn) - replay_lsn)``.

    :param obs: the replica's observation.
    :param master: the position of the selected master, or of the master
        selected last; ``None`` if no master was ever seen.
    :return: bytes still to replay, or ``None`` when there is nothing to
        compare with or the replica is on another timeline than the master.
    """
    if obs.replay_lsn is None:
        return None
    if master is not None and timelines_differ(obs.timeline, master.timeline):
        return None
    candidates = [
        v
        for v in (master.lsn if master else None, obs.receive_lsn, obs.latest_end_lsn)
        if v is not None
    ]
    if not candidates:
        return None
    return max(0, max(candidates) - obs.replay_lsn)


def commit_age_ms(obs: Observation, master: MasterPosition | None) -> int | None:
    """
    Age of the last replayed transaction, in milliseconds, corrected for a
    replica clock that is behind the master's by more than the measurement
    accuracy of both clocks.

    :return: ``None`` until the replica has replayed a transaction.
    """
    if obs.replay_ts is None:
        return None
    age = obs.server_now - obs.replay_ts
    if master is not None:
        behind = master.clock_offset - obs.clock_offset
        if behind > master.accuracy + obs.accuracy:
            age += behind
    return max(0, round(age * 1000))


def lag_ms(
    obs: Observation,
    master: MasterPosition | None,
    master_check_ok: bool,
    now: float,
) -> int | None:
    """
    ``min(commit_age, time since the start of the master's last check)``
    while the replica sits exactly at that check's position (a page header
    apart counts as exactly) on the same timeline, the check succeeded and
    the master had no unwritten WAL; otherwise the commit age alone.

    :param master: the currently selected master's last position, or
        ``None`` when no master is selected.
    :param master_check_ok: the selected master's last check succeeded.
    :param now: local time the bound is measured at.
    :return: milliseconds, or ``None`` when unknown.
    """
    age = commit_age_ms(obs, master)
    if (
        master is not None
        and master_check_ok
        and not master.unwritten
        and obs.replay_lsn is not None
        and obs.past_header(obs.replay_lsn) == obs.past_header(master.lsn)
        and obs.timeline is not None
        and obs.timeline == master.timeline
    ):
        bound = max(0, round((now - master.check_started) * 1000))
        return bound if age is None else min(age, bound)
    return age
