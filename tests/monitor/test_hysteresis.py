"""
Eviction hysteresis and a serving floor (additions, off by default): a
replica leaves the sync set after N consecutive checks over the threshold,
re-enters only under a lower one; ``min_serving_replicas`` keeps the
least-lagging replicas eligible; ``/hosts`` says why a replica is out.
"""

from __future__ import annotations

import json
import secrets

import pytest
import pytest_twisted

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.http.responses import Renderer
from pgstatus.model.selection import select_master
from pgstatus.model.status import HostStatus, View
from pgstatus.monitor import sync
from pgstatus.monitor.registry import Registry
from service import RunningService, blocking, wait_until

P = "pg_status__"


@pytest.mark.parametrize("lag", [None, 0, 999, 1000, 1001, 10**9])
@pytest.mark.parametrize("state", [None, sync.Membership(True), sync.Membership(False)])
def test_without_hysteresis_step_is_the_threshold(lag, state):
    assert sync.step(state, lag, 1000, None, 0).member == (lag is not None and lag <= 1000)


def test_evicted_after_n_checks_and_back_only_under_reenter():
    seq = [(500, True), (2000, True), (2000, True), (2000, False), (900, False),
           (400, True), (2000, True), (600, True)]
    state = None
    for lag, expected in seq:
        state = sync.step(state, lag, 1000, 500, 3)
        assert state.member is expected, (lag, state)


def run_checks(config, lags):
    """
    Record one check per entry of ``lags`` (a lag, or ``"fail"``) through a
    registry; the statuses each recording returned.
    """
    registry = Registry(ConfigProvider(config))
    st = registry.states[0]
    out = []
    for lag in lags:
        if lag == "fail":
            out.append(registry.record_failure(st))
        else:
            out.append(registry.record_success(st, master=False, lsn=1, timeline=1, lag_ms=lag,
                                               lag_bytes=0, position=None))
        assert out[-1] == registry.view.hosts[0]
    return out


def test_host_state_applies_hysteresis_per_check_and_keeps_it_across_failures():
    config = load_config({P + "hosts": "r", P + "sync_evict_after_checks": "2",
                          P + "sync_reenter_lag_ms": "300"})
    s = run_checks(config, [100, 5000, "fail", 5000, 600, 200])
    assert [x.sync_by_time for x in s] == [True, True, True, False, False, True]
    assert s[3].sync_note == "lag_ms 5000 over 1000"
    assert s[4].sync_note == "lag_ms 600 not yet back under 300 after eviction"
    assert s[5].sync_note is None


def test_default_config_is_the_spec():
    config = load_config({P + "hosts": "r"})
    s = run_checks(config, [100, 5000, 600])
    assert [x.sync_by_time for x in s] == [True, False, True]
    assert all(x.sync_note is None for x in s)


def view(*lags_ms):
    hs = [HostStatus(0, "m", None, None, checked=True, reached=True, alive=True, master=True,
                     lag_ms=0, lag_bytes=0, lsn=100, timeline=1, sync_by_time=True,
                     sync_by_bytes=True)]
    for i, lag in enumerate(lags_ms, start=1):
        hs.append(HostStatus(i, f"r{i}", None, None, checked=True, reached=True, alive=True,
                             lag_ms=lag, lag_bytes=lag, lsn=100, timeline=1,
                             sync_by_time=lag <= 1000, sync_by_bytes=lag <= 1000))
    hosts = tuple(hs)
    return View(hosts, select_master(hosts), True, 1)


def test_serving_floor_keeps_least_lagging_replicas():
    # (views memoise answers per renderer configuration: one view each)
    v0 = view(5000, 2000, 9000)
    plain = Renderer(lambda: v0, ConfigProvider(load_config({P + "hosts": "m,r1,r2,r3"})), "1")
    assert {plain.answer("sync_by_time", b"", False).body for _ in range(4)} == {b"m"}
    v = view(5000, 2000, 9000)
    cfg = load_config({P + "hosts": "m,r1,r2,r3", P + "min_serving_replicas": "2"})
    floor = Renderer(lambda: v, ConfigProvider(cfg), "1")
    assert {floor.answer("sync_by_time", b"", False).body for _ in range(6)} == {b"r1", b"r2"}
    # an explicit limit is the client's word: no floor
    assert floor.answer("sync_by_time", b"lag_ms=1000", False).body == b"m"
    # /hosts carries the sync_note field (hand-built statuses have none)
    body = json.loads(floor.hosts().body)
    assert all("sync_note" in h for h in body)


def test_hosts_unchanged_without_the_settings():
    v = view(5000)
    r = Renderer(lambda: v, ConfigProvider(load_config({P + "hosts": "m,r1"})), "1")
    assert "sync_note" not in json.loads(r.hosts().body)[1]


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_paused_replica_evicted_after_n_checks_and_reenters(guarded_topology, reactor):
    """
    Against the real topology: with sync_evict_after_checks=4 a replica
    whose replay is paused behind a write stays in sync_by_bytes for three
    more checks, then leaves; after resume it re-enters once under the
    re-entry threshold.
    """
    topo = guarded_topology
    victim, other = topo.replicas
    svc = RunningService(reactor, {
        **topo.hosts_env(), P + "sleep_ms": "200", P + "query_timeout_ms": "300",
        P + "sync_max_lag_bytes": "1000", P + "sync_reenter_lag_bytes": "0",
        P + "sync_evict_after_checks": "4"})
    try:
        yield wait_until(reactor, lambda: svc.view.ready and svc.host(victim.host).sync_by_bytes
                         and svc.host(other.host).sync_by_bytes, 10, "both in sync")
        yield blocking(victim.pause_replay)
        yield blocking(topo.write, secrets.token_hex(10000))
        mon = next(m for m in svc.monitor.monitors if m.name == victim.host)
        yield wait_until(reactor, lambda: (svc.host(victim.host).lag_bytes or 0) > 1000, 5,
                         "lag over the threshold")
        over_at = mon.checks
        while svc.host(victim.host).sync_by_bytes:
            yield wait_until(reactor, lambda n=mon.checks: mon.checks > n, 5, "a check")
        assert 2 <= mon.checks - over_at <= 5, mon.checks - over_at
        r = yield svc.get("/hosts")
        note = next(h for h in r.json() if h["host"] == victim.host)["sync_note"]
        assert "lag_bytes " in note and "over 1000" in note, note
        for _ in range(4):
            r = yield svc.get("/sync_by_bytes")
            assert r.text == other.host
        yield blocking(victim.resume_replay)
        yield wait_until(reactor, lambda: svc.host(victim.host).sync_by_bytes, 10, "re-entry")
        assert svc.host(victim.host).lag_bytes == 0
    finally:
        yield svc.stop()


def test_membership_starts_afresh_after_death_even_when_a_reload_revives_the_host():
    """
    A replica evicted, then dead: its membership is forgotten at its
    death, so after a reload raises ``max_fails`` (the host counts as
    possibly dead again) its next success is judged afresh (in at 80 ms,
    under the 100 ms limit, though over the 50 ms re-entry threshold).
    """
    env = {P + "hosts": "r", P + "max_fails": "2", P + "sync_max_lag_ms": "100",
           P + "sync_reenter_lag_ms": "50", P + "sync_evict_after_checks": "1"}
    settings = ConfigProvider(load_config(env))
    registry = Registry(settings)
    st = registry.states[0]

    def ok(lag):
        return registry.record_success(st, master=False, lsn=1, timeline=1, lag_ms=lag,
                                       lag_bytes=0, position=None)

    assert ok(10).sync_by_time and not ok(500).sync_by_time  # evicted
    registry.record_failure(st)
    assert not registry.record_failure(st).alive  # dead
    settings.swap(load_config({**env, P + "max_fails": "5"}))
    registry.reconfigure(registry.states)
    assert registry.view.hosts[0].alive and registry.view.hosts[0].possible_dead
    assert ok(80).sync_by_time
