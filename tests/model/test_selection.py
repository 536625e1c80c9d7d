"""
Tests for :mod:`pgstatus.model.selection`: master selection, replica filters,
health tiers, locality, ``most_sync`` and round-robin.

Everything here is pure: hand-built :class:`~pgstatus.model.status.HostStatus`
tuples, no reactor, no I/O.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgstatus.model.selection import (
    Filters,
    Locality,
    RoundRobin,
    candidates,
    local_group,
    matches,
    most_sync,
    replayed,
    select_master,
)
from pgstatus.model.status import HostStatus

LSN = 0x3000060


def master(
    i: int,
    name: str | None = None,
    *,
    possible_dead: bool = False,
    lsn: int | None = LSN,
    timeline: int | None = 1,
    dc: str | None = None,
    geo: str | None = None,
) -> HostStatus:
    """
    A live master as the state module renders it: lags 0, sync flags true.
    """
    return HostStatus(
        i, name or f"m{i}", dc, geo, checked=True, reached=True, alive=True,
        possible_dead=possible_dead, master=True, lag_ms=0, lag_bytes=0, lsn=lsn,
        timeline=timeline, sync_by_time=True, sync_by_bytes=True,
    )


def replica(
    i: int,
    name: str | None = None,
    *,
    lag_ms: int | None = 0,
    lag_bytes: int | None = 0,
    lsn: int | None = LSN,
    timeline: int | None = 1,
    possible_dead: bool = False,
    dc: str | None = None,
    geo: str | None = None,
) -> HostStatus:
    """
    A live replica (possibly dead if asked) with the given measurements.
    """
    return HostStatus(
        i, name or f"r{i}", dc, geo, checked=True, reached=True, alive=True,
        possible_dead=possible_dead, master=False, lag_ms=lag_ms, lag_bytes=lag_bytes,
        lsn=lsn, timeline=timeline,
    )


def dead(i: int, name: str | None = None, *, master_flag: bool = False,
         dc: str | None = None, geo: str | None = None) -> HostStatus:
    """
    A dead host.  ``master_flag`` builds an inconsistent status (a dead
    host that still claims the master role) to check that selection looks
    at ``alive`` too.
    """
    return HostStatus(
        i, name or f"d{i}", dc, geo, checked=True, reached=True, alive=False,
        possible_dead=True, master=master_flag,
    )


def names(hosts) -> list[str]:
    """
    The names of ``hosts``, in order.
    """
    return [h.name for h in hosts]


# ---------------------------------------------------------------------------
# select_master


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        pytest.param([], None, id="no-hosts"),
        pytest.param([replica(0), replica(1)], None, id="only-replicas"),
        pytest.param([master(0)], "m0", id="single-master"),
        pytest.param([replica(0), master(1)], "m1", id="master-after-replica"),
        pytest.param([master(0, possible_dead=True)], "m0", id="possibly-dead-master"),
        pytest.param(
            [master(0, possible_dead=True), master(1)], "m1",
            id="healthy-beats-earlier-possibly-dead",
        ),
        pytest.param(
            [master(0, possible_dead=True), master(1, possible_dead=True)], "m0",
            id="split-brain-possibly-dead-first-in-order",
        ),
        pytest.param([master(0), master(1)], "m0", id="split-brain-first-in-order"),
        pytest.param(
            [replica(0), master(1), master(2), master(3, possible_dead=True)], "m1",
            id="split-brain-three",
        ),
        pytest.param(
            [master(0, possible_dead=True), replica(1), master(2), master(3)], "m2",
            id="split-brain-within-healthy-tier",
        ),
        pytest.param([dead(0, master_flag=True)], None, id="dead-never"),
        pytest.param(
            [dead(0, master_flag=True), master(1, possible_dead=True)], "m1",
            id="dead-skipped-for-possibly-dead",
        ),
        pytest.param([dead(0), dead(1)], None, id="all-dead"),
    ],
)
def test_select_master(hosts, expected):
    """
    Healthy masters first, then possibly dead ones, first in host order
    within the best tier; dead hosts never.
    """
    got = select_master(tuple(hosts))
    assert (got.name if got else None) == expected


_host_kinds = st.sampled_from(["healthy-master", "pd-master", "replica", "pd-replica", "dead"])


@given(st.lists(_host_kinds, max_size=8))
def test_select_master_property(kinds):
    """
    The selected master is the first healthy master if any, else the first
    possibly dead master, else none; never a replica or a dead host.
    """
    build = {
        "healthy-master": lambda i: master(i),
        "pd-master": lambda i: master(i, possible_dead=True),
        "replica": lambda i: replica(i),
        "pd-replica": lambda i: replica(i, possible_dead=True),
        "dead": lambda i: dead(i, master_flag=True),
    }
    hosts = tuple(build[k](i) for i, k in enumerate(kinds))
    got = select_master(hosts)
    healthy = [h for h in hosts if h.master and h.alive and not h.possible_dead]
    weak = [h for h in hosts if h.master and h.alive and h.possible_dead]
    expected = (healthy or weak or [None])[0]
    assert got is expected


# ---------------------------------------------------------------------------
# matches: lag thresholds


@pytest.mark.parametrize(
    ("lag_ms", "lag_bytes", "f", "expected"),
    [
        # no limit: anything goes, unknown lags included
        (0, 0, Filters(), True),
        (None, None, Filters(), True),
        (10**9, 10**12, Filters(), True),
        # lag_ms only
        (100, None, Filters(lag_ms=100), True),
        (100, None, Filters(lag_ms=99), False),
        (0, 5, Filters(lag_ms=0), True),
        (None, 0, Filters(lag_ms=10**9), False),
        # lag_bytes only
        (None, 100, Filters(lag_bytes=100), True),
        (None, 101, Filters(lag_bytes=100), False),
        (0, None, Filters(lag_bytes=10**9), False),
        # and
        (100, 100, Filters(lag_ms=100, lag_bytes=100), True),
        (101, 100, Filters(lag_ms=100, lag_bytes=100), False),
        (100, 101, Filters(lag_ms=100, lag_bytes=100), False),
        (None, 100, Filters(lag_ms=100, lag_bytes=100), False),
        (100, None, Filters(lag_ms=100, lag_bytes=100), False),
        # or
        (100, 5000, Filters(lag_ms=100, lag_bytes=100, mode="or"), True),
        (5000, 100, Filters(lag_ms=100, lag_bytes=100, mode="or"), True),
        (100, 100, Filters(lag_ms=100, lag_bytes=100, mode="or"), True),
        (101, 101, Filters(lag_ms=100, lag_bytes=100, mode="or"), False),
        (100, None, Filters(lag_ms=100, lag_bytes=100, mode="or"), True),
        (None, 100, Filters(lag_ms=100, lag_bytes=100, mode="or"), True),
        (None, None, Filters(lag_ms=100, lag_bytes=100, mode="or"), False),
        (None, 101, Filters(lag_ms=100, lag_bytes=100, mode="or"), False),
        (101, None, Filters(lag_ms=100, lag_bytes=100, mode="or"), False),
        # "or" with only one limit is that limit
        (101, 0, Filters(lag_ms=100, mode="or"), False),
        (100, None, Filters(lag_ms=100, mode="or"), True),
        (None, 100, Filters(lag_bytes=100, mode="or"), True),
        (None, None, Filters(mode="or"), True),
    ],
)
def test_matches_lag_thresholds(lag_ms, lag_bytes, f, expected):
    """
    A lag meets a threshold when it is known and at most the threshold; an
    unknown lag meets none, but passes when that lag has no limit.
    """
    h = replica(1, lag_ms=lag_ms, lag_bytes=lag_bytes)
    assert matches(h, f, master(0)) is expected


_lag = st.one_of(st.none(), st.integers(0, 10**6))
_limit = st.one_of(st.none(), st.integers(0, 10**6))


@given(_lag, _lag, _limit, _limit, st.sampled_from(["and", "or"]))
def test_matches_lag_agrees_with_definition(lag_ms, lag_bytes, max_ms, max_bytes, mode):
    """
    ``matches`` agrees with a direct statement of the threshold rules.
    """
    def ok(lag, limit):
        return lag is not None and lag <= limit

    limits = [(lag_ms, max_ms), (lag_bytes, max_bytes)]
    given_ = [ok(lag, limit) for lag, limit in limits if limit is not None]
    if not given_:
        expected = True
    elif mode == "or":
        expected = any(given_)
    else:
        expected = all(given_)
    f = Filters(lag_ms=max_ms, lag_bytes=max_bytes, mode=mode)
    h = replica(1, lag_ms=lag_ms, lag_bytes=lag_bytes)
    assert matches(h, f, master(0)) is expected


@given(_lag, st.integers(0, 10**6), st.integers(0, 10**6))
def test_matches_monotonic_in_threshold(lag_ms, low, extra):
    """
    Raising a threshold never excludes a replica that met the lower one.
    """
    h = replica(1, lag_ms=lag_ms)
    if matches(h, Filters(lag_ms=low), master(0)):
        assert matches(h, Filters(lag_ms=low + extra), master(0))


# ---------------------------------------------------------------------------
# matches: min_lsn


@pytest.mark.parametrize(
    ("replayed", "replica_tl", "master_tl", "min_lsn", "expected"),
    [
        pytest.param(LSN, 1, 1, LSN, True, id="exactly-replayed"),
        pytest.param(LSN + 1, 1, 1, LSN, True, id="replayed-past"),
        pytest.param(LSN - 1, 1, 1, LSN, False, id="one-byte-short"),
        pytest.param(0, 1, 1, 0, True, id="zero"),
        pytest.param(1 << 32, 1, 1, (1 << 32) - 1, True, id="high-word"),
        pytest.param((1 << 32) - 1, 1, 1, 1 << 32, False, id="high-word-short"),
        pytest.param(None, 1, 1, 0, False, id="lsn-unknown"),
        pytest.param(LSN, 1, 2, LSN, False, id="replica-on-older-timeline"),
        pytest.param(LSN + 10**6, 3, 2, LSN, False, id="replica-on-other-history"),
        pytest.param(LSN, None, 2, LSN, True, id="replica-timeline-unknown-position-only"),
        pytest.param(LSN - 1, None, 2, LSN, False, id="replica-timeline-unknown-short"),
        pytest.param(LSN, 2, None, LSN, True, id="master-timeline-unknown"),
    ],
)
def test_matches_min_lsn(replayed, replica_tl, master_tl, min_lsn, expected):
    """
    min_lsn: replayed position at least min_lsn, and a replica whose known
    timeline differs from the master's never matches; an unknown replica
    timeline compares positions only.
    """
    h = replica(1, lsn=replayed, timeline=replica_tl)
    m = master(0, timeline=master_tl)
    assert matches(h, Filters(min_lsn=min_lsn), m) is expected


@pytest.mark.parametrize(
    ("replica_tl", "expected"), [(1, True), (2, True), (None, True)]
)
def test_matches_min_lsn_without_master(replica_tl, expected):
    """
    With no master selected there is no timeline to compare with: positions
    only.
    """
    h = replica(1, lsn=LSN, timeline=replica_tl)
    assert matches(h, Filters(min_lsn=LSN), None) is expected
    assert matches(h, Filters(min_lsn=LSN + 1), None) is False


def test_min_lsn_follows_selected_master_timeline():
    """
    A replica left on the abandoned history stops matching min_lsn as soon
    as the master on the new timeline is the one passed in (selected).
    """
    old = replica(1, lsn=LSN + 100, timeline=1)
    follower = replica(2, lsn=LSN + 100, timeline=2)
    f = Filters(min_lsn=LSN)
    assert matches(old, f, master(0, timeline=1))
    assert not matches(old, f, master(3, timeline=2))
    assert matches(follower, f, master(3, timeline=2))


# ---------------------------------------------------------------------------
# matches: timeline


@pytest.mark.parametrize(
    ("replica_tl", "master_tl", "timeline", "expected"),
    [
        pytest.param(2, 2, 2, True, id="same-timeline"),
        pytest.param(3, 3, 2, False, id="replica-on-later-timeline"),
        pytest.param(1, 2, 2, False, id="replica-on-earlier-timeline"),
        pytest.param(None, 2, 2, False, id="replica-timeline-unknown"),
        pytest.param(2, 3, 2, False, id="master-on-later-timeline"),
        pytest.param(3, 2, 3, True, id="new-master-not-selected-yet"),
        pytest.param(2, None, 2, True, id="master-timeline-unknown"),
        pytest.param(4294967295, 4294967295, 4294967295, True, id="max-timeline"),
    ],
)
def test_matches_timeline(replica_tl, master_tl, timeline, expected):
    """
    timeline: only a replica known to be on that timeline matches, and none
    does once the selected master is on a later timeline.
    """
    h = replica(1, timeline=replica_tl)
    m = master(0, timeline=master_tl)
    assert matches(h, Filters(timeline=timeline), m) is expected


def test_matches_timeline_without_master():
    """
    With no master selected, timeline alone decides.
    """
    assert matches(replica(1, timeline=2), Filters(timeline=2), None)
    assert not matches(replica(1, timeline=None), Filters(timeline=2), None)


def test_matches_timeline_alone_does_not_need_lsn():
    """
    timeline can be used without min_lsn; the position is then irrelevant.
    """
    assert matches(replica(1, lsn=None, timeline=2), Filters(timeline=2), master(0, timeline=2))


@pytest.mark.parametrize(
    ("h", "expected"),
    [
        pytest.param(replica(1, lag_ms=10, lag_bytes=10, lsn=LSN, timeline=2), True, id="all"),
        pytest.param(replica(1, lag_ms=11, lag_bytes=10, lsn=LSN, timeline=2), False, id="ms"),
        pytest.param(replica(1, lag_ms=10, lag_bytes=11, lsn=LSN, timeline=2), False,
                     id="bytes"),
        pytest.param(replica(1, lag_ms=10, lag_bytes=10, lsn=LSN - 1, timeline=2), False,
                     id="lsn"),
        pytest.param(replica(1, lag_ms=10, lag_bytes=10, lsn=LSN, timeline=None), False,
                     id="timeline-unknown"),
        pytest.param(replica(1, lag_ms=10, lag_bytes=10, lsn=LSN, timeline=1), False,
                     id="timeline-other"),
    ],
)
def test_matches_combination(h, expected):
    """
    Lag limits, min_lsn and timeline combine: every one must hold.
    """
    f = Filters(lag_ms=10, lag_bytes=10, min_lsn=LSN, timeline=2)
    assert matches(h, f, master(0, timeline=2)) is expected


@pytest.mark.parametrize(
    ("h", "expected"),
    [
        (replica(1, lag_ms=10, lag_bytes=999, lsn=LSN), True),
        (replica(1, lag_ms=999, lag_bytes=999, lsn=LSN), False),
        (replica(1, lag_ms=10, lag_bytes=999, lsn=LSN - 1), False),
    ],
)
def test_matches_or_mode_still_needs_min_lsn(h, expected):
    """
    "or" applies to the lag limits only; min_lsn must hold regardless.
    """
    f = Filters(lag_ms=10, lag_bytes=10, mode="or", min_lsn=LSN)
    assert matches(h, f, master(0)) is expected


# ---------------------------------------------------------------------------
# candidates: health tiers


@pytest.mark.parametrize(
    ("hosts", "f", "expected"),
    [
        pytest.param([master(0)], Filters(), [], id="master-alone"),
        pytest.param([master(0), replica(1), replica(2)], Filters(), ["r1", "r2"],
                     id="healthy-replicas-in-order"),
        pytest.param([master(0), replica(1, possible_dead=True), replica(2)], Filters(),
                     ["r2"], id="healthy-preferred"),
        pytest.param(
            [master(0), replica(1, possible_dead=True), replica(2, lag_ms=500)],
            Filters(lag_ms=100), ["r1"], id="possibly-dead-when-no-healthy-matches",
        ),
        pytest.param(
            [master(0), replica(1, possible_dead=True), replica(2, possible_dead=True)],
            Filters(), ["r1", "r2"], id="all-possibly-dead",
        ),
        pytest.param(
            [master(0), replica(1, possible_dead=True, lag_ms=500)], Filters(lag_ms=100),
            [], id="possibly-dead-uses-last-lag",
        ),
        pytest.param([master(0), dead(1), dead(2)], Filters(), [], id="dead-excluded"),
        pytest.param([master(0), dead(1), replica(2, possible_dead=True)], Filters(), ["r2"],
                     id="dead-excluded-possibly-dead-kept"),
        pytest.param([master(0), master(1), replica(2)], Filters(), ["r2"],
                     id="split-brain-master-is-no-replica"),
        pytest.param([master(0, possible_dead=True), replica(1)], Filters(), ["r1"],
                     id="possibly-dead-master-is-no-replica"),
        pytest.param([replica(0), replica(1)], Filters(), ["r0", "r1"], id="no-master"),
        pytest.param([replica(0, lsn=None)], Filters(min_lsn=0), [], id="min-lsn-unknown"),
    ],
)
def test_candidates(hosts, f, expected):
    """
    Live replicas passing the filters, from the best health tier that has
    any, in host order; masters and dead hosts never.
    """
    hosts = tuple(hosts)
    assert names(candidates(hosts, f, select_master(hosts))) == expected


@given(st.lists(st.sampled_from(["replica", "pd-replica", "dead", "master", "slow"]),
                max_size=8))
def test_candidates_property(kinds):
    """
    Candidates are live non-masters passing the filter, all from one health
    tier, and the healthy tier whenever it has a match.
    """
    build = {
        "replica": lambda i: replica(i, lag_ms=10),
        "pd-replica": lambda i: replica(i, lag_ms=10, possible_dead=True),
        "slow": lambda i: replica(i, lag_ms=10**6),
        "dead": lambda i: dead(i),
        "master": lambda i: master(i),
    }
    hosts = tuple(build[k](i) for i, k in enumerate(kinds))
    f = Filters(lag_ms=100)
    got = candidates(hosts, f, select_master(hosts))
    assert all(h.alive and not h.master and h.lag_ms <= 100 for h in got)
    assert len({h.possible_dead for h in got}) <= 1
    healthy = [h for h in hosts if h.healthy and not h.master and h.lag_ms <= 100]
    if healthy:
        assert list(got) == healthy
    assert [h.index for h in got] == sorted(h.index for h in got)


# ---------------------------------------------------------------------------
# Locality


def _located() -> tuple[HostStatus, ...]:
    return (
        replica(1, "fra-1", dc="frankfurt", geo="europe"),
        replica(2, "ams-1", dc="amsterdam", geo="europe"),
        replica(3, "fra-2", dc="frankfurt", geo="europe"),
        replica(4, "nyc-1", dc="newyork", geo="america"),
    )


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        pytest.param(Locality(), ["fra-1", "ams-1", "fra-2", "nyc-1"], id="no-locality"),
        pytest.param(Locality("frankfurt", "europe"), ["fra-1", "fra-2"], id="dc"),
        pytest.param(Locality("frankfurt", None), ["fra-1", "fra-2"], id="dc-only"),
        pytest.param(Locality("paris", "europe"), ["fra-1", "ams-1", "fra-2"],
                     id="geo-when-no-dc-match"),
        pytest.param(Locality(None, "america"), ["nyc-1"], id="geo-only"),
        pytest.param(Locality("paris", "asia"), ["fra-1", "ams-1", "fra-2", "nyc-1"],
                     id="all-when-nothing-local"),
        pytest.param(Locality("paris", None), ["fra-1", "ams-1", "fra-2", "nyc-1"],
                     id="dc-miss-no-geo"),
        pytest.param(Locality("newyork", "europe"), ["nyc-1"], id="dc-beats-geo"),
    ],
)
def test_local_group(where, expected):
    """
    The current DC's replicas, else the current geo's, else all of them.
    """
    assert names(local_group(_located(), where)) == expected


def test_local_group_empty():
    """
    No replicas: an empty group whatever the locality.
    """
    assert local_group((), Locality("frankfurt", "europe")) == ()


def test_locality_never_makes_unsuitable_replica_eligible():
    """
    Locality narrows the replicas that passed the filters; a lagging local
    replica loses to a fresh remote one, and a geo match is used when the
    DC's replica is unsuitable.
    """
    hosts = (
        master(0, dc="frankfurt", geo="europe"),
        replica(1, "fra-stale", lag_ms=5000, dc="frankfurt", geo="europe"),
        replica(2, "ams-fresh", lag_ms=10, dc="amsterdam", geo="europe"),
        replica(3, "nyc-fresh", lag_ms=10, dc="newyork", geo="america"),
    )
    found = candidates(hosts, Filters(lag_ms=100), hosts[0])
    assert names(local_group(found, Locality("frankfurt", "europe"))) == ["ams-fresh"]
    found = candidates(hosts, Filters(lag_ms=1), hosts[0])
    assert local_group(found, Locality("frankfurt", "europe")) == ()


def test_health_tier_before_locality():
    """
    A healthy remote replica beats a possibly dead local one: the health
    tier is chosen first, locality within it.
    """
    hosts = (
        master(0, dc="frankfurt", geo="europe"),
        replica(1, "fra-weak", possible_dead=True, dc="frankfurt", geo="europe"),
        replica(2, "nyc", dc="newyork", geo="america"),
    )
    found = candidates(hosts, Filters(), hosts[0])
    assert names(local_group(found, Locality("frankfurt", "europe"))) == ["nyc"]


# ---------------------------------------------------------------------------
# most_sync


@pytest.mark.parametrize(
    ("lags", "expected"),
    [
        pytest.param([], None, id="empty"),
        pytest.param([100], "r0", id="single"),
        pytest.param([100, 50, 200], "r1", id="smallest"),
        pytest.param([100, 50, 50], "r1", id="tie-host-order"),
        pytest.param([0, 0, 0], "r0", id="all-zero"),
        pytest.param([None, 500], "r1", id="unknown-skipped"),
        pytest.param([None, None], None, id="all-unknown"),
        pytest.param([7, None, 3, 3], "r2", id="mixed"),
    ],
)
def test_most_sync(lags, expected):
    """
    The smallest known lag_bytes; ties by host order; unknown never.
    """
    hosts = tuple(replica(i, lag_bytes=b) for i, b in enumerate(lags))
    got = most_sync(hosts)
    assert (got.name if got else None) == expected


def test_most_sync_ignores_locality():
    """
    most_sync takes no locality: the remote replica with the smallest byte
    lag wins over a local one.
    """
    hosts = (
        replica(1, "fra", lag_bytes=100, dc="frankfurt", geo="europe"),
        replica(2, "nyc", lag_bytes=10, dc="newyork", geo="america"),
    )
    assert most_sync(hosts).name == "nyc"


# ---------------------------------------------------------------------------
# RoundRobin


def test_round_robin_group_of_one():
    """
    A group of one always yields its member.
    """
    rr = RoundRobin()
    only = (replica(3),)
    assert [rr.pick(only).name for _ in range(5)] == ["r3"] * 5


def test_round_robin_cycles_through_group():
    """
    Consecutive picks visit every member before repeating one.
    """
    rr = RoundRobin()
    group = (replica(1), replica(2), replica(3))
    picks = [rr.pick(group).name for _ in range(9)]
    assert sorted(picks[:3]) == ["r1", "r2", "r3"]
    assert picks[:3] == picks[3:6] == picks[6:]


@given(st.integers(1, 10), st.integers(0, 200))
def test_round_robin_fair(size, n):
    """
    Over any number of picks each member is chosen within one of the
    others.
    """
    rr = RoundRobin()
    group = tuple(replica(i) for i in range(size))
    counts = Counter(rr.pick(group).index for _ in range(n))
    per_member = [counts.get(i, 0) for i in range(size)]
    assert sum(per_member) == n
    assert max(per_member) - min(per_member) <= 1


@given(st.lists(st.sampled_from([0, 1, 2]), max_size=300))
def test_round_robin_groups_do_not_disturb_each_other(sequence):
    """
    Interleaved requests for different groups keep each group's rotation
    fair on its own.
    """
    groups = [
        (replica(1), replica(2)),
        (replica(1), replica(2), replica(3)),
        (replica(4), replica(5), replica(6), replica(7)),
    ]
    rr = RoundRobin()
    counts = [Counter() for _ in groups]
    for g in sequence:
        h = rr.pick(groups[g])
        assert h in groups[g]
        counts[g][h.index] += 1
    for g, group in enumerate(groups):
        per_member = [counts[g].get(h.index, 0) for h in group]
        assert max(per_member) - min(per_member) <= 1


def test_round_robin_identical_group_objects_share_rotation():
    """
    The rotation belongs to the group's membership, not to the tuple
    object: a rebuilt group (new view, same hosts) continues it.
    """
    rr = RoundRobin()
    first = rr.pick((replica(1), replica(2))).name
    second = rr.pick((replica(1, lag_ms=5), replica(2, lag_ms=5))).name
    assert {first, second} == {"r1", "r2"}


def test_round_robin_limit_forgets_but_stays_valid():
    """
    Past its limit of remembered groups, the picker starts afresh and still
    returns members of the requested group.
    """
    rr = RoundRobin(limit=2)
    groups = [tuple(replica(i + j) for j in range(2)) for i in range(0, 10, 2)]
    for _ in range(3):
        for g in groups:
            assert rr.pick(g) in g


def test_min_lsn_inside_a_page_header_is_met_at_the_page_start():
    """
    A replica at a page boundary (``lsn``) whose ``replayed_through`` is past that
    page's header meets a ``min_lsn`` anywhere up to the header's end, and
    no further; without ``replayed_through`` its ``lsn`` decides.
    """
    boundary = 0x4000000
    from dataclasses import replace

    at = replace(replica(1, lsn=boundary), replayed_through=boundary + 40)
    m = master(0)
    for pos in (boundary, boundary + 1, boundary + 40):
        assert replayed(at, pos)
        assert matches(at, Filters(min_lsn=pos), m)
    assert not replayed(at, boundary + 41)
    assert not matches(at, Filters(min_lsn=boundary + 41), m)
    plain = replica(1, lsn=boundary)
    assert replayed(plain, boundary) and not replayed(plain, boundary + 40)
    assert not replayed(replica(1, lsn=None), 0)
