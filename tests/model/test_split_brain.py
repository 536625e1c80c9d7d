"""
Split brain: which of several hosts reporting master is selected under
each rule (``pg_status__split_brain``), the one WARNING that says so (once
per change, not per check), and the ``/metrics`` count of hosts reporting
master.  Pure functions on hand-built views.
"""

from __future__ import annotations

import pytest
from test_selection import dead, master, replica
from twisted.logger import LogLevel

from pgstatus.config.environ import load_config
from pgstatus.config.settings import ConfigError
from pgstatus.model.selection import select_master
from pgstatus.model.status import View
from pgstatus.monitor.changes import describe_changes


@pytest.mark.parametrize(
    ("hosts", "first", "timeline"),
    [
        pytest.param([master(0, timeline=2), master(1, timeline=3)], "m0", "m1",
                     id="promoted-standby-later-in-order"),
        pytest.param([master(0, timeline=3), master(1, timeline=2)], "m0", "m0",
                     id="promoted-standby-first"),
        pytest.param([master(0, timeline=2), master(1, timeline=2)], "m0", "m0",
                     id="equal-timelines-host-order"),
        pytest.param([master(0, timeline=None), master(1, timeline=1)], "m0", "m1",
                     id="unknown-timeline-loses"),
        pytest.param([master(0, timeline=2), master(1, timeline=5, possible_dead=True)],
                     "m0", "m0", id="healthy-group-first"),
        pytest.param([master(0, timeline=2, possible_dead=True),
                      master(1, timeline=5, possible_dead=True)], "m0", "m1",
                     id="possibly-dead-group"),
        pytest.param([replica(0, timeline=9), master(1, timeline=2), dead(2, master_flag=True)],
                     "m1", "m1", id="replicas-and-dead-never"),
        pytest.param([replica(0)], None, None, id="no-master"),
    ],
)
def test_rules(hosts, first, timeline):
    for rule, expected in (("first", first), ("timeline", timeline)):
        got = select_master(tuple(hosts), rule)
        assert (got.name if got else None) == expected, rule


def _view(*hosts, rule="first"):
    return View(tuple(hosts), select_master(tuple(hosts), rule), True, 1)


def _lines(old, new, rule="first"):
    config = load_config({"pg_status__hosts": "m0,m1,m2", "pg_status__split_brain": rule})
    return [(level, fmt.format(**fields)) for level, fmt, fields in
            describe_changes(old, new, config) if "split brain" in fmt]


def test_one_warning_per_change_naming_each_master():
    one = _view(master(0, timeline=2), replica(1, timeline=2))
    two = _view(master(0, timeline=2), master(1, timeline=3), rule="timeline")
    assert _lines(one, two, "timeline") == [(
        LogLevel.warn, "split brain: several hosts report master "
        "masters=m0(timeline=2),m1(timeline=3) selected=m1 rule=timeline")]
    # another check of the same two masters (new positions): no new line
    again = _view(master(0, timeline=2, lsn=99), master(1, timeline=3, lsn=98),
                  rule="timeline")
    assert _lines(two, again, "timeline") == []
    # the old master steps down: no split brain, no line
    assert _lines(two, _view(replica(0, timeline=3), master(1, timeline=3))) == []


def test_warning_under_the_original_rule_too():
    one = _view(master(0, timeline=2), replica(1, timeline=2))
    two = _view(master(0, timeline=2), master(1, timeline=3))
    assert _lines(one, two) == [(
        LogLevel.warn, "split brain: several hosts report master "
        "masters=m0(timeline=2),m1(timeline=3) selected=m0 rule=first")]


def test_the_setting():
    assert load_config({"pg_status__hosts": "a"}).split_brain == "first"
    assert load_config({"pg_status__hosts": "a",
                        "pg_status__split_brain": " Timeline "}).split_brain == "timeline"
    with pytest.raises(ConfigError) as e:
        load_config({"pg_status__hosts": "a", "pg_status__split_brain": "newest"})
    assert e.value.variable == "pg_status__split_brain"
    assert "must be first or timeline" in str(e.value)
