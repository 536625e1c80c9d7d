"""
Tests for :mod:`pgstatus.model.status`: host state transitions, the registry's
views and readiness, the master position kept for lag, and the log events
derived from two views.

No reactor: check results are recorded by calling the registry's
``record_success``/``record_failure`` directly.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.logger import LogLevel

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.model.status import HostStatus, View
from pgstatus.monitor.changes import describe_changes
from pgstatus.monitor.lag import MasterPosition
from pgstatus.monitor.registry import Registry

P = "pg_status__"
LSN = 0x3000060


def config(hosts: str = "m,a,b", max_fails: int = 3, **values: str):
    """
    A configuration with sync thresholds 100 ms / 100 bytes.
    """
    env = {
        P + "hosts": hosts,
        P + "max_fails": str(max_fails),
        P + "sync_max_lag_ms": "100",
        P + "sync_max_lag_bytes": "100",
    }
    env.update({P + k: v for k, v in values.items()})
    return load_config(env)


def pos(index: int, lsn: int = LSN, timeline: int | None = 1) -> MasterPosition:
    """
    A master position from a check of host ``index`` (the check's start
    time tells the hosts' positions apart).
    """
    return MasterPosition(lsn=lsn, unwritten=False, timeline=timeline,
                          check_started=10.0 + index, clock_offset=0.0, accuracy=0.001)


class Host:
    """
    One host of a registry, as the monitor sees it: its results are
    recorded through the registry, which publishes them.
    """

    def __init__(self, registry: Registry, index: int) -> None:
        self.registry = registry
        self.index = index
        self.handle = registry.states[index]

    def succeeded(self, **result) -> HostStatus:
        return self.registry.record_success(self.handle, **result)

    def failed(self) -> HostStatus:
        return self.registry.record_failure(self.handle)

    def status(self, cfg=None) -> HostStatus:
        return self.registry.view.hosts[self.index]

    @property
    def failures(self) -> int:
        return self.registry.failures(self.handle)

    @property
    def position(self) -> MasterPosition | None:
        return self.handle.position


def registry(cfg) -> Registry:
    """
    A registry for ``cfg``.
    """
    return Registry(ConfigProvider(cfg))


def _host(where, index: int | None) -> Host:
    return where if isinstance(where, Host) else Host(where, index)


def ok_master(where, index: int | None = None, lsn: int = LSN,
              position: MasterPosition | None = None) -> HostStatus:
    """
    Record a successful check of a host (a :class:`Host`, or a registry and
    an index) as a master.
    """
    h = _host(where, index)
    return h.succeeded(master=True, lsn=lsn, timeline=1, lag_ms=None, lag_bytes=None,
                       position=position or pos(h.index, lsn))


def ok_replica(where, index: int | None = None, lag_ms: int | None = 10,
               lag_bytes: int | None = 10, lsn: int | None = LSN) -> HostStatus:
    """
    Record a successful check of a host as a replica.
    """
    return _host(where, index).succeeded(master=False, lsn=lsn, timeline=1, lag_ms=lag_ms,
                                         lag_bytes=lag_bytes, position=None)


def fail(reg: Registry, index: int) -> HostStatus:
    """
    Record a failed check of host ``index``.
    """
    return Host(reg, index).failed()


def state(cfg, index: int = 1) -> Host:
    """
    Host ``index`` of a fresh registry for ``cfg``.
    """
    return Host(registry(cfg), index)


# ---------------------------------------------------------------------------
# HostState


def test_never_checked():
    """
    Before its first check a host is not alive and has no values.
    """
    cfg = config()
    s = state(cfg).status(cfg)
    assert s == HostStatus(1, "a", None, None)
    assert (s.checked, s.alive, s.possible_dead, s.master) == (False, False, False, False)


def test_never_reached_first_failure_is_not_alive():
    """
    A host whose first check fails, never reached, is shown not alive with
    nulls (the lead's rule: there are no last values to keep).
    """
    cfg = config()
    st_ = state(cfg)
    st_.failed()
    s = st_.status(cfg)
    assert s.checked and not s.reached
    assert (s.alive, s.possible_dead, s.master) == (False, True, False)
    assert (s.lag_ms, s.lag_bytes, s.lsn, s.timeline) == (None, None, None, None)
    assert (s.sync_by_time, s.sync_by_bytes) == (False, False)


def test_never_reached_then_success_is_alive():
    """
    The first success after failed first checks makes the host alive.
    """
    cfg = config()
    st_ = state(cfg)
    st_.failed()
    st_.failed()
    ok_replica(st_, lag_ms=5, lag_bytes=6)
    s = st_.status(cfg)
    assert (s.alive, s.possible_dead, s.lag_ms, s.lag_bytes) == (True, False, 5, 6)


@pytest.mark.parametrize("max_fails", [1, 2, 3, 5])
def test_replica_transitions(max_fails):
    """
    alive -> possibly dead after the first failure (last values kept) ->
    dead after max_fails consecutive failures (nulls, false flags) -> one
    success clears everything.
    """
    cfg = config(max_fails=max_fails)
    st_ = state(cfg)
    ok_replica(st_, lag_ms=50, lag_bytes=500, lsn=LSN)
    alive = st_.status(cfg)
    assert (alive.alive, alive.possible_dead) == (True, False)
    assert (alive.lag_ms, alive.lag_bytes, alive.lsn) == (50, 500, LSN)
    assert (alive.sync_by_time, alive.sync_by_bytes) == (True, False)

    for n in range(1, max_fails):
        st_.failed()
        s = st_.status(cfg)
        assert (s.alive, s.possible_dead) == (True, True), n
        assert (s.lag_ms, s.lag_bytes, s.lsn, s.timeline) == (50, 500, LSN, 1)
        assert (s.sync_by_time, s.sync_by_bytes) == (True, False)

    st_.failed()
    s = st_.status(cfg)
    assert (s.alive, s.possible_dead, s.master) == (False, True, False)
    assert (s.lag_ms, s.lag_bytes, s.lsn, s.timeline) == (None, None, None, None)
    assert (s.sync_by_time, s.sync_by_bytes) == (False, False)

    st_.failed()
    assert st_.status(cfg) == s

    ok_replica(st_, lag_ms=7, lag_bytes=8, lsn=LSN + 1)
    s = st_.status(cfg)
    assert (s.alive, s.possible_dead) == (True, False)
    assert (s.lag_ms, s.lag_bytes, s.lsn) == (7, 8, LSN + 1)
    assert st_.failures == 0


def test_success_between_failures_resets_count():
    """
    Failures must be consecutive: a success in between starts over.
    """
    cfg = config(max_fails=3)
    st_ = state(cfg)
    ok_replica(st_)
    st_.failed()
    st_.failed()
    ok_replica(st_)
    st_.failed()
    st_.failed()
    assert st_.status(cfg).alive
    st_.failed()
    assert not st_.status(cfg).alive


def test_master_transitions():
    """
    A master keeps its role while possibly dead and loses it once dead.
    """
    cfg = config(max_fails=2)
    st_ = state(cfg, 0)
    ok_master(st_)
    s = st_.status(cfg)
    assert (s.master, s.lag_ms, s.lag_bytes, s.sync_by_time, s.sync_by_bytes) == (
        True, 0, 0, True, True)
    assert s.lsn == LSN
    st_.failed()
    s = st_.status(cfg)
    assert (s.master, s.alive, s.possible_dead, s.lag_ms, s.lsn) == (True, True, True, 0, LSN)
    assert st_.position == pos(0)
    st_.failed()
    s = st_.status(cfg)
    assert (s.master, s.alive, s.lag_ms, s.lsn) == (False, False, None, None)


def test_master_lags_are_zero_whatever_is_passed():
    """
    lag_ms and lag_bytes are 0 on the master.
    """
    cfg = config()
    st_ = state(cfg, 0)
    st_.succeeded(master=True, lsn=LSN, timeline=1, lag_ms=999, lag_bytes=999,
                  position=pos(0))
    s = st_.status(cfg)
    assert (s.lag_ms, s.lag_bytes) == (0, 0)


def test_position_only_for_masters():
    """
    A replica keeps no master position, and a demoted master loses it.
    """
    cfg = config()
    st_ = state(cfg, 0)
    ok_master(st_)
    assert st_.position is not None
    st_.succeeded(master=False, lsn=LSN, timeline=1, lag_ms=1, lag_bytes=1, position=pos(0))
    assert st_.position is None
    assert not st_.status(cfg).master


@pytest.mark.parametrize(
    ("lag", "expected"),
    [(0, True), (99, True), (100, True), (101, False), (None, False)],
)
def test_sync_flags_against_global_thresholds(lag, expected):
    """
    sync_by_time/sync_by_bytes: the lag is known and at most the global
    threshold (100 here).
    """
    cfg = config()
    st_ = state(cfg)
    ok_replica(st_, lag_ms=lag, lag_bytes=lag)
    s = st_.status(cfg)
    assert (s.sync_by_time, s.sync_by_bytes) == (expected, expected)
    assert (s.lag_ms, s.lag_bytes) == (lag, lag)


@given(st.integers(1, 6), st.lists(st.booleans(), max_size=30))
def test_health_follows_consecutive_failures(max_fails, outcomes):
    """
    For any sequence of check outcomes after a first success: alive until
    max_fails consecutive failures, possibly dead after any failure.
    """
    cfg = config(max_fails=max_fails)
    st_ = state(cfg)
    ok_replica(st_)
    streak = 0
    for ok in outcomes:
        if ok:
            ok_replica(st_)
            streak = 0
        else:
            st_.failed()
            streak += 1
        s = st_.status(cfg)
        assert s.alive is (streak < max_fails)
        assert s.possible_dead is (streak > 0)
        assert (s.lag_ms is None) is (streak >= max_fails)


# ---------------------------------------------------------------------------
# Registry


def test_registry_initial_view():
    """
    Before any check: not ready, no master, generation 0, every host
    unchecked.
    """
    reg = registry(config())
    v = reg.view
    assert (v.ready, v.master, v.generation) == (False, None, 0)
    assert [h.name for h in v.hosts] == ["m", "a", "b"]
    assert not any(h.checked for h in v.hosts)


def test_registry_ready_only_when_every_host_checked():
    """
    The view becomes ready when the last host completes its first check,
    successful or not.
    """
    reg = registry(config())
    ok_master(reg, 0)
    assert not reg.view.ready
    fail(reg, 2)
    assert not reg.view.ready
    ok_replica(reg, 1)
    v = reg.view
    assert v.ready
    assert v.master is not None and v.master.name == "m"


def test_registry_ready_with_every_host_failing():
    """
    Readiness needs no live host.
    """
    reg = registry(config())
    for i in range(len(reg.states)):
        fail(reg, i)
        v = reg.view
    assert v.ready and v.master is None
    assert not any(h.alive for h in v.hosts)


def test_registry_never_unready_again():
    """
    Later outages never make the registry unready.
    """
    reg = registry(config(max_fails=1))
    ok_master(reg, 0)
    for i in (1, 2):
        ok_replica(reg, i)
    assert reg.view.ready
    for _ in range(3):
        for i in range(len(reg.states)):
            fail(reg, i)
            assert reg.view.ready


def test_registry_generation_and_observers():
    """
    Every publication bumps the generation and calls observers with the old
    and new views.
    """
    reg = registry(config())
    calls: list[tuple[View, View]] = []
    reg.observe(lambda old, new: calls.append((old, new)))
    first = reg.view
    ok_master(reg, 0)
    v1 = reg.view
    ok_replica(reg, 1)
    v2 = reg.view
    assert (v1.generation, v2.generation) == (1, 2)
    assert calls == [(first, v1), (v1, v2)]
    assert reg.view is v2


def test_registry_views_are_snapshots():
    """
    A published view does not change when a host state changes later.
    """
    reg = registry(config())
    ok_replica(reg, 1, lag_ms=1)
    v = reg.view
    ok_replica(reg, 1, lag_ms=2)
    assert v.hosts[1].lag_ms == 1
    assert reg.view.hosts[1].lag_ms == 2


def test_registry_master_state():
    """
    master_state is the state of the selected master, or None.
    """
    reg = registry(config(max_fails=1))
    assert reg.master_state() is None
    ok_master(reg, 2)
    assert reg.master_state() is reg.states[2]
    fail(reg, 2)
    assert reg.master_state() is None


def test_last_master_position_follows_selected_master():
    """
    The position for lag is the selected master's; kept when the master
    disappears; replaced when another master is selected.
    """
    reg = registry(config(max_fails=2))
    assert reg.reference_position is None
    ok_master(reg, 0, lsn=100)
    assert reg.reference_position == pos(0, 100)

    ok_master(reg, 0, lsn=200)
    assert reg.reference_position == pos(0, 200)

    fail(reg, 0)  # possibly dead: still selected, same position
    assert reg.view.master.name == "m"
    assert reg.reference_position == pos(0, 200)

    fail(reg, 0)  # dead: no master, position kept
    assert reg.view.master is None
    assert reg.reference_position == pos(0, 200)

    ok_replica(reg, 1)  # other publications keep it too
    assert reg.reference_position == pos(0, 200)

    ok_master(reg, 2, lsn=300)
    assert reg.view.master.name == "b"
    assert reg.reference_position == pos(2, 300)


def test_last_master_position_ignores_split_brain_master():
    """
    Another master, as in a split brain, does not count: only the selected
    (first in host order) master's position is used.
    """
    reg = registry(config())
    ok_master(reg, 0, lsn=100)
    ok_master(reg, 2, lsn=999)
    v = reg.view
    assert v.master.name == "m"
    assert reg.reference_position == pos(0, 100)


def test_split_brain_healthy_master_beats_possibly_dead_first():
    """
    Within the best health group: a healthy later master wins over a
    possibly dead earlier one, and its position becomes the lag reference.
    """
    reg = registry(config())
    ok_master(reg, 0, lsn=100)
    ok_master(reg, 2, lsn=500)
    fail(reg, 0)
    v = reg.view
    assert v.master.name == "b"
    assert reg.reference_position == pos(2, 500)


# ---------------------------------------------------------------------------
# describe_changes


def _status(i: int, name: str, **kw) -> HostStatus:
    base = dict(checked=True, reached=True, alive=True)
    base.update(kw)
    return HostStatus(i, name, None, None, **base)


def _v(*hosts: HostStatus, ready: bool = True, master: int | None = None) -> View:
    m = None if master is None else hosts[master]
    return View(tuple(hosts), m, ready, 1)


def _messages(old: View, new: View) -> list[tuple[LogLevel, str]]:
    return [(level, fmt.format(**fields))
            for level, fmt, fields in describe_changes(old, new, config("pg-1"))]


UNCHECKED = HostStatus(0, "pg-1", None, None)
REPLICA = _status(0, "pg-1", lag_ms=10, lag_bytes=10, sync_by_time=True, sync_by_bytes=True)
MASTER = _status(0, "pg-1", master=True, lag_ms=0, lag_bytes=0, sync_by_time=True,
                 sync_by_bytes=True)
PD_REPLICA = _status(0, "pg-1", possible_dead=True, lag_ms=10, lag_bytes=10,
                     sync_by_time=True, sync_by_bytes=True)
DEAD = _status(0, "pg-1", alive=False, possible_dead=True)
NEVER_REACHED = _status(0, "pg-1", reached=False, alive=False, possible_dead=True)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(REPLICA, REPLICA, [], id="no-change"),
        pytest.param(UNCHECKED, REPLICA, [
            (LogLevel.info, "host state changed host=pg-1 state=alive role=replica"),
        ], id="first-check-replica"),
        pytest.param(UNCHECKED, MASTER, [
            (LogLevel.info, "host state changed host=pg-1 state=alive role=master"),
        ], id="first-check-master"),
        pytest.param(UNCHECKED, NEVER_REACHED, [
            (LogLevel.warn, "host state changed host=pg-1 state=dead"),
        ], id="first-check-failed"),
        pytest.param(REPLICA, PD_REPLICA, [
            (LogLevel.warn, "host state changed host=pg-1 state=possible_dead"),
        ], id="possible-dead-is-warning"),
        pytest.param(PD_REPLICA, DEAD, [
            (LogLevel.warn, "host state changed host=pg-1 state=dead"),
        ], id="dead-is-warning"),
        pytest.param(REPLICA, DEAD, [
            (LogLevel.warn, "host state changed host=pg-1 state=dead"),
        ], id="straight-to-dead"),
        pytest.param(PD_REPLICA, REPLICA, [
            (LogLevel.info, "host state changed host=pg-1 state=alive role=replica"),
        ], id="recovered-from-possible-dead"),
        pytest.param(DEAD, REPLICA, [
            (LogLevel.info, "host state changed host=pg-1 state=alive role=replica"),
        ], id="recovered-from-dead"),
        pytest.param(DEAD, MASTER, [
            (LogLevel.info, "host state changed host=pg-1 state=alive role=master"),
        ], id="recovered-as-master"),
        pytest.param(REPLICA, MASTER, [
            (LogLevel.info, "host role changed host=pg-1 role=master"),
        ], id="promoted"),
        pytest.param(MASTER, REPLICA, [
            (LogLevel.info, "host role changed host=pg-1 role=replica"),
        ], id="demoted"),
        pytest.param(REPLICA, _status(0, "pg-1", lag_ms=500, lag_bytes=10, sync_by_time=False,
                                      sync_by_bytes=True), [
            (LogLevel.info,
             "replica synchronization changed host=pg-1 dimension=time synchronous=false "
             "lag_ms=500 threshold_ms=100"),
        ], id="sync-by-time-lost"),
        pytest.param(_status(0, "pg-1", lag_ms=500, lag_bytes=None), REPLICA, [
            (LogLevel.info,
             "replica synchronization changed host=pg-1 dimension=time synchronous=true "
             "lag_ms=10 threshold_ms=100"),
            (LogLevel.info,
             "replica synchronization changed host=pg-1 dimension=bytes synchronous=true "
             "lag_bytes=10 threshold_bytes=100"),
        ], id="sync-regained"),
        pytest.param(REPLICA, _status(0, "pg-1", lag_ms=10, lag_bytes=None, sync_by_time=True),
                     [(LogLevel.info,
                       "replica synchronization changed host=pg-1 dimension=bytes "
                       "synchronous=false lag_bytes=null threshold_bytes=100")],
                     id="sync-by-bytes-unknown-lag"),
        pytest.param(REPLICA, _status(0, "pg-1", lag_ms=20, lag_bytes=20, sync_by_time=True,
                                      sync_by_bytes=True), [], id="lag-change-within-sync"),
    ],
)
def test_describe_host_changes(old, new, expected):
    """
    Availability (possibly dead/dead as warnings), role and sync-threshold
    crossings of one host, formatted as the log lines show them.
    """
    assert _messages(_v(old), _v(new)) == expected


def test_describe_sync_crossing_not_reported_when_dying():
    """
    A host going dead reports its availability, not the sync flags it
    loses with its values.
    """
    msgs = _messages(_v(REPLICA), _v(DEAD))
    assert not any("synchronization" in m for _, m in msgs)


def test_describe_ready():
    """
    Becoming ready is reported once, at info.
    """
    a = _v(REPLICA, ready=False)
    b = _v(REPLICA, ready=True)
    assert _messages(a, b) == [
        (LogLevel.info, "monitor ready: every host completed its first check")]
    assert _messages(b, b) == []


def test_describe_master_changes():
    """
    Master selection changes are reported with the new and previous master
    ("none" when there is none).
    """
    m1 = _status(0, "pg-1", master=True, lag_ms=0, lag_bytes=0)
    m2 = _status(1, "pg-2", master=True, lag_ms=0, lag_bytes=0)
    r2 = _status(1, "pg-2", lag_ms=0, lag_bytes=0)
    d1 = _status(0, "pg-1", alive=False, possible_dead=True)

    def changes(old, new):
        return [m for _, m in _messages(old, new) if m.startswith("master changed")]

    assert changes(_v(m1, r2, master=0), _v(d1, r2)) == [
        "master changed master=none previous=pg-1"]
    assert changes(_v(d1, r2), _v(d1, m2, master=1)) == [
        "master changed master=pg-2 previous=none"]
    assert changes(_v(m1, r2, master=0), _v(m1, m2, master=0)) == []
    pd1 = _status(0, "pg-1", master=True, possible_dead=True, lag_ms=0, lag_bytes=0)
    assert changes(_v(pd1, m2, master=0), _v(pd1, m2, master=1)) == [
        "master changed master=pg-2 previous=pg-1"]
    assert changes(_v(d1, r2), _v(d1, r2)) == []


def test_describe_changes_from_registry():
    """
    Events come out of real publications: the first checks, a failure, a
    death and the master selection.
    """
    cfg = config("m,a", max_fails=2)
    reg = registry(cfg)
    events: list[tuple[LogLevel, str]] = []
    reg.observe(lambda old, new: events.extend(
        (lvl, fmt.format(**f)) for lvl, fmt, f in describe_changes(old, new, cfg)))
    ok_master(reg, 0)
    ok_replica(reg, 1)
    fail(reg, 0)
    fail(reg, 0)
    assert events == [
        (LogLevel.info, "host state changed host=m state=alive role=master"),
        (LogLevel.info, "master changed master=m previous=none"),
        (LogLevel.info, "monitor ready: every host completed its first check"),
        (LogLevel.info, "host state changed host=a state=alive role=replica"),
        (LogLevel.warn, "host state changed host=m state=possible_dead"),
        (LogLevel.warn, "host state changed host=m state=dead"),
        (LogLevel.info, "master changed master=none previous=m"),
    ]
