"""
Follower mode without I/O: snapshots to and from views, the event parser,
and the registry publishing a mirrored view and handing back to its own
checks.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.model.snapshot import SnapshotError, decode, encode
from pgstatus.model.status import HostStatus, View
from pgstatus.monitor.httpbody import parse_event
from pgstatus.monitor.registry import Registry

P = "pg_status__"


def config(**extra: str):
    return load_config({P + "hosts": "m,a,b", P + "pg_port": "5432,5433,5434",
                        P + "hosts_dc": "x,y,z", P + "current_dc": "z", P + "max_fails": "3",
                        **{P + k: v for k, v in extra.items()}})


def view(master: int | None = 0) -> View:
    hosts = (
        HostStatus(0, "m", "hub-dc", None, checked=True, reached=True, alive=True,
                   master=True, lag_ms=0, lag_bytes=0, lsn=0x3000060, replayed_through=0x3000060,
                   timeline=2, sync_by_time=True, sync_by_bytes=True),
        HostStatus(1, "a", "hub-dc", None, checked=True, reached=True, alive=True,
                   possible_dead=True, lag_ms=12, lag_bytes=456, lsn=0x2FFFE98,
                   replayed_through=0x2FFFE98, timeline=2, sync_by_time=True, sync_by_bytes=True,
                   sync_note="lag_ms 12 over 10"),
        HostStatus(2, "b", None, None, checked=True, reached=False, alive=False,
                   possible_dead=True),
    )
    return View(hosts, None if master is None else hosts[master], True, 7)


def test_round_trip_keeps_measurements_and_takes_our_locality():
    cfg = config()
    data = encode(view(), cfg.hosts, 41)
    version, ready, master, statuses = decode(data, cfg.hosts)
    assert (version, ready, master) == (41, True, 0)
    for ours, theirs in zip(statuses, view().hosts, strict=True):
        assert (ours.dc, ours.geo) == (cfg.hosts[ours.index].dc, None)
        for field in ("checked", "reached", "alive", "possible_dead", "master", "lag_ms",
                      "lag_bytes", "lsn", "replayed_through", "timeline", "sync_by_time",
                      "sync_by_bytes", "sync_note"):
            assert getattr(ours, field) == getattr(theirs, field), field
    # the stream keeps the name the format was defined with
    import json

    rows = json.loads(data)["hosts"]
    assert "reach" in rows[0] and "replayed_through" not in rows[0]


def test_snapshot_has_no_secrets_or_locality():
    cfg = config(pg_password="s3cret-pw", pg_user="monitor")
    text = encode(view(), cfg.hosts, 1).decode()
    assert "s3cret" not in text and "monitor" not in text and "hub-dc" not in text


@pytest.mark.parametrize("change, why", [
    (lambda d: d["hosts"].pop(), "another host list"),
    (lambda d: d["hosts"][1].update(host="other"), "is not a:5433"),
    (lambda d: d["hosts"][1].update(port=5432), "is not a:5433"),
    (lambda d: d.update(format=2), "format"),
    (lambda d: d.update(master=1), "live masters"),
    (lambda d: d.update(master=7), "live masters"),
    (lambda d: d["hosts"][0].update(lag_ms=-1), "lag_ms"),
    (lambda d: d["hosts"][0].update(lsn="0/3000060"), "lsn"),
    (lambda d: d["hosts"][0].update(alive="yes"), "alive"),
    (lambda d: d["hosts"][0].update(lag_bytes=True), "lag_bytes"),
    (lambda d: d.pop("version"), "version"),
])
def test_unusable_snapshots_are_refused(change, why):
    cfg = config()
    doc = json.loads(encode(view(), cfg.hosts, 3))
    change(doc)
    with pytest.raises(SnapshotError, match=why):
        decode(json.dumps(doc), cfg.hosts)


def test_not_json_is_refused():
    with pytest.raises(SnapshotError):
        decode(b"{", config().hosts)


def test_parse_event():
    assert parse_event(b"event: snapshot\ndata: {\"a\":1}") == ("snapshot", b'{"a":1}')
    assert parse_event(b"data:x\ndata: y") == ("message", b"x\ny")
    assert parse_event(b": comment") == ("message", b"")


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(),
                          st.one_of(st.none(), st.integers(0, 2**63))), min_size=3,
                max_size=3))
def test_round_trip_property(rows):
    cfg = config()
    hosts = tuple(
        HostStatus(i, h.name, None, None, checked=True, reached=True, alive=alive,
                   possible_dead=pd, master=master, lag_ms=n, lag_bytes=n, lsn=n)
        for i, (h, (alive, pd, master, n)) in enumerate(zip(cfg.hosts, rows, strict=True)))
    masters = [h for h in hosts if h.alive and h.master]
    v = View(hosts, masters[0] if masters else None, True, 1)
    _, _, master, statuses = decode(encode(v, cfg.hosts, 1), cfg.hosts)
    assert master == (masters[0].index if masters else None)
    assert [(s.alive, s.possible_dead, s.master, s.lsn) for s in statuses] == [
        (h.alive, h.possible_dead, h.master, h.lsn) for h in hosts]


def test_registry_mirror_then_own_checks():
    """
    A mirrored view is published as it is; readiness stays once reached;
    seeding gives our states the mirrored availability; the mirrored view
    stays published until every host has a check of ours, then our own
    view replaces it at once.
    """
    cfg = config()
    reg = Registry(ConfigProvider(cfg))
    # a position left from an earlier time of our own polling
    from pgstatus.monitor.lag import MasterPosition

    stale = MasterPosition(lsn=123, unwritten=False, timeline=1,
                           check_started=0.0, clock_offset=0.0, accuracy=0.0)
    reg.record_success(reg.states[0], master=True, lsn=123, timeline=1, lag_ms=0, lag_bytes=0,
                       position=stale)
    assert reg.reference_position == stale
    seen: list[View] = []
    reg.observe(lambda old, new: seen.append(new))
    _, ready, master, statuses = decode(encode(view(), cfg.hosts, 1), cfg.hosts)
    v = reg.mirror(statuses, master, ready)
    assert seen == [v] and v.ready and v.master.name == "m"
    assert v.hosts[1].possible_dead and not v.hosts[2].alive
    reg.seed_from_view()
    assert reg.states[0].position is None and reg.reference_position is None
    a, b = reg.states[1], reg.states[2]
    assert a.reached and reg.failures(a) == 1 and not reg.is_dead(a)
    assert reg.is_dead(b)
    assert reg.holding
    held = reg.view
    # one failure of ours does not kill the possibly dead host the hub reached
    status = reg.record_failure(a)
    assert status.alive and status.possible_dead
    # recorded, not published: the hub's view stays until every host is checked
    assert reg.view is held and len(seen) == 1
    reg.record_success(reg.states[0], master=True, lsn=0x3000100, timeline=2, lag_ms=0,
                       lag_bytes=0, position=None)
    assert reg.view is held and reg.holding
    reg.record_failure(b)
    assert not reg.holding and len(seen) == 2
    v = reg.view
    assert v.hosts[0].lsn == 0x3000100  # ours now
    assert v.hosts[1].alive and v.hosts[1].possible_dead and not v.hosts[2].alive
    assert v.master.name == "m" and v.ready
    # a mirrored view that is not ready does not undo readiness
    v = reg.mirror(statuses, master, False)
    assert v.ready


def test_mirrored_view_held_until_every_host_is_checked():
    """
    While our checks take over, a master that our checks alone make dead
    before another host's first check has ended does not show: the hub's
    view answers until the round is complete, then ours does, whatever it
    says; a snapshot arriving meanwhile ends the hold.
    """
    cfg = config()
    reg = Registry(ConfigProvider(cfg))
    _, ready, master, statuses = decode(encode(view(), cfg.hosts, 1), cfg.hosts)
    held = reg.mirror(statuses, master, ready)
    reg.seed_from_view()
    m, a, b = reg.states
    for _ in range(3):
        reg.record_failure(m)
    assert reg.is_dead(m)
    reg.record_failure(b)
    assert reg.view is held and reg.view.master.name == "m"
    reg.record_success(a, master=False, lsn=1, timeline=2, lag_ms=None, lag_bytes=None,
                       position=None)
    assert not reg.holding and reg.view.master is None  # our own view, as it is
    # nothing to hold when the published view is our own (a reload to a
    # host list the hub's snapshots do not fit)
    reg.seed_from_view()
    assert not reg.holding
    # a hub delivering again ends a hold
    reg.mirror(statuses, master, ready)
    reg.seed_from_view()
    assert reg.holding
    reg.mirror(statuses, master, ready)
    assert not reg.holding
    reg.record_failure(m)
    assert reg.view.hosts[0].possible_dead  # ours, published at once


def test_reload_during_the_hold_keeps_it():
    """
    A reload while our checks take over keeps the hub's view published in
    the new order (an added host unchecked), until the hosts not checked
    yet, the added one included, have a check of ours.
    """
    cfg = config()
    provider = ConfigProvider(cfg)
    reg = Registry(provider)
    _, ready, master, statuses = decode(encode(view(), cfg.hosts, 1), cfg.hosts)
    reg.mirror(statuses, master, ready)
    reg.seed_from_view()
    m, a, b = reg.states
    reg.record_failure(b)
    # b removed, c added, a moved first
    new = load_config({P + "hosts": "a,m,c", P + "pg_port": "5433,5432,5435"})
    provider.swap(new)
    c = reg.new_state(new.hosts[2])
    v = reg.reconfigure([a, m, c])
    assert reg.holding
    assert [h.name for h in v.hosts] == ["a", "m", "c"]
    assert v.hosts[0].possible_dead and v.hosts[0].lag_ms == 12  # the hub's, moved
    assert v.master is not None and v.master.name == "m" and v.master.index == 1
    reg.record_success(m, master=True, lsn=5, timeline=2, lag_ms=0, lag_bytes=0, position=None)
    reg.record_success(a, master=False, lsn=5, timeline=2, lag_ms=0, lag_bytes=0,
                       position=None)
    assert reg.holding and reg.view is v
    reg.record_failure(c)
    assert not reg.holding and reg.view.master.name == "m"
    assert reg.view.hosts[0].lsn == 5
