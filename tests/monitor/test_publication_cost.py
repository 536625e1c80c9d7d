"""
Publishing a check's result does work per changed host, not per host
(issue 33, item 7): with a thousand hosts checked every second, a pass over
every host per check was a million steps a second, and the service spent a
core on it.  Counted, not timed: every attribute read of a published
:class:`HostStatus` is recorded with the host's position, so a publication
that looks at the hosts it did not change shows up here, whatever the
machine's speed.
"""

from __future__ import annotations

import pytest
from twisted.logger import LogLevel

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.model.status import HostStatus, View
from pgstatus.monitor import hoststate
from pgstatus.monitor.changes import changed_positions, describe_changes
from pgstatus.monitor.lag import MasterPosition
from pgstatus.monitor.registry import Registry

#: positions of the statuses whose attributes were read
TOUCHED: list[int] = []


class Counting(HostStatus):
    """
    A :class:`HostStatus` that records every read of its attributes.
    """

    __slots__ = ()

    def __getattribute__(self, name: str):
        TOUCHED.append(object.__getattribute__(self, "index"))
        return object.__getattribute__(self, name)


@pytest.fixture(autouse=True)
def _counting(monkeypatch):
    # the registry's host records make every status it publishes
    monkeypatch.setattr(hoststate, "HostStatus", Counting)
    TOUCHED.clear()


def _position(lsn: int) -> MasterPosition:
    return MasterPosition(lsn=lsn, unwritten=False, timeline=1, check_started=10.0,
                          clock_offset=0.0, accuracy=0.001)


def _polled(n: int) -> tuple[Registry, list[list]]:
    """
    A ready registry of ``n`` hosts, the log lines observers were given
    collected: the first half replicas, then the master (in the middle, so
    that a pass over the hosts in order would meet the others first), the
    rest refused connections (dead).
    """
    cfg = load_config({"pg_status__hosts": ",".join(f"h{i}" for i in range(n))})
    registry = Registry(ConfigProvider(cfg))
    lines: list[list] = []
    registry.observe(lambda old, new: lines.append(list(describe_changes(old, new, cfg))))
    states = registry.states
    for st in states[:n // 2]:
        registry.record_success(st, master=False, lsn=100, timeline=1, lag_ms=5, lag_bytes=0,
                                position=None)
    registry.record_success(states[n // 2], master=True, lsn=100, timeline=1, lag_ms=None,
                            lag_bytes=None, position=_position(100))
    for st in states[n // 2 + 1:]:
        registry.record_failure(st)
    assert registry.view.ready and registry.view.master.index == n // 2
    TOUCHED.clear()
    lines.clear()
    return registry, lines


def _touches(n: int) -> dict[str, set[int]]:
    """
    The positions of the statuses each kind of check looks at, in a
    registry of ``n`` hosts, as offsets from the master's (0) and the
    checked host's (``"host"``).
    """
    registry, lines = _polled(n)
    states, m = registry.states, n // 2
    out = {}

    def looked(kind: str, host: int) -> None:
        out[kind] = {"host" if i == host else i - m for i in TOUCHED}
        out[kind + " reads"] = len(TOUCHED)
        TOUCHED.clear()

    registry.record_failure(states[n - 1])  # a dead host's connection refused again
    looked("dead", n - 1)
    registry.record_success(states[1], master=False, lsn=120, timeline=1, lag_ms=7,
                            lag_bytes=20, position=None)
    looked("replica", 1)
    registry.record_success(states[m], master=True, lsn=140, timeline=1, lag_ms=None,
                            lag_bytes=None, position=_position(140))
    looked("master", m)
    registry.record_failure(states[2])  # a replica becomes possibly dead: a log line
    looked("failing", 2)
    assert [fmt for batch in lines for _, fmt, _ in batch] == [
        "host state changed host={host} state={state}"]
    return out


def test_a_check_looks_at_its_host_and_the_master_only():
    """
    Publishing a check (and describing it for the log) reads the checked
    host's statuses and the master's (the one candidate for selection),
    never another host's: the same reads with 20 hosts as with 400.
    """
    small, large = _touches(20), _touches(400)
    assert small == large
    assert large["dead"] <= {"host", 0}
    assert large["replica"] <= {"host", 0}
    assert large["master"] <= {"host"}
    assert large["failing"] <= {"host", 0}


def test_an_unchanged_result_publishes_the_same_status_object():
    """
    A check whose result equals the published status (a dead host refused
    again) publishes a new view, as every check does, holding the very same
    status object, and says that no position changed.
    """
    registry, lines = _polled(10)
    before = registry.view
    status = registry.record_failure(registry.states[9])
    after = registry.view
    assert after.generation == before.generation + 1
    assert status is before.hosts[9] and after.hosts == before.hosts
    assert all(a is b for a, b in zip(before.hosts, after.hosts, strict=True))
    assert after.changed == ()
    assert lines == [[]]
    changed = registry.record_failure(registry.states[3])  # a replica's first failure
    assert registry.view.changed == (3,) and changed is registry.view.hosts[3]


class Visits(tuple):
    """
    A view's hosts that count the positions taken out of them.
    """

    visited = 0

    def __getitem__(self, i):
        Visits.visited += 1
        return super().__getitem__(i)

    def __iter__(self):
        for h in super().__iter__():
            Visits.visited += 1
            yield h


def _status(i: int, **fields) -> Counting:
    defaults = {"checked": True, "reached": True, "alive": True, "lag_ms": 0, "lag_bytes": 0}
    return Counting(i, f"h{i}", None, None, **{**defaults, **fields})


def test_describe_changes_skips_unchanged_statuses_by_identity():
    """
    Between two views, only the positions holding another status object are
    compared, whether the new view names them or not; the lines are those
    of a full comparison.
    """
    config = load_config({"pg_status__hosts": ",".join(f"h{i}" for i in range(300))})
    hosts = [_status(0, master=True)] + [_status(i) for i in range(1, 300)]
    old = View(tuple(hosts), hosts[0], True, 7)
    hosts[150] = _status(150, alive=False, possible_dead=True, lag_ms=None, lag_bytes=None)
    named = View(tuple(hosts), hosts[0], True, 8, changed=(150,))
    unnamed = View(tuple(hosts), hosts[0], True, 8)
    for new in (named, unnamed):
        TOUCHED.clear()
        assert list(changed_positions(old, new)) == [150]
        assert describe_changes(old, new, config) == [
            (LogLevel.warn, "host state changed host={host} state={state}",
             {"host": "h150", "state": "dead"})]
        assert set(TOUCHED) <= {150, 0}  # and the selected master's index
    # the view published right after: not even a pass by identity
    Visits.visited = 0
    describe_changes(View(Visits(old.hosts), hosts[0], True, 7),
                     View(Visits(hosts), hosts[0], True, 8, changed=(150,)), config)
    assert Visits.visited <= 2


def test_describe_changes_trusts_changed_only_for_the_next_generation():
    """
    :attr:`View.changed` speaks of the view of the previous generation
    only: against any other view, the positions are found by identity.
    """
    hosts = tuple(_status(i) for i in range(5))
    old = View(hosts, None, True, 3)
    newer = View(hosts[:2] + (_status(2, lag_ms=9),) + hosts[3:], None, True, 5, changed=())
    assert list(changed_positions(old, newer)) == [2]


def test_a_second_master_is_still_a_split_brain():
    """
    The split brain warning comes when a changed host's claim to be master
    makes two, and not again at the next check of either master.
    """
    config = load_config({"pg_status__hosts": ",".join(f"h{i}" for i in range(50))})
    hosts = [_status(0, master=True, timeline=1)] + [_status(i) for i in range(1, 50)]
    one = View(tuple(hosts), hosts[0], True, 1)
    hosts[30] = _status(30, master=True, timeline=2)
    two = View(tuple(hosts), hosts[0], True, 2, changed=(30,))
    TOUCHED.clear()
    assert [fmt.format(**f) for _, fmt, f in describe_changes(one, two, config)
            if "split brain" in fmt] == [
        "split brain: several hosts report master masters=h0(timeline=1),h30(timeline=2) "
        "selected=h0 rule=first"]
    hosts[30] = _status(30, master=True, timeline=2, lsn=5)
    three = View(tuple(hosts), hosts[0], True, 3, changed=(30,))
    TOUCHED.clear()
    assert describe_changes(two, three, config) == []
    assert set(TOUCHED) <= {30, 0}
