"""
Sticky replicas per session key (``key=``, an addition): rendezvous hashing
among the eligible replicas instead of round-robin.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from http_apis import query

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.http.responses import Renderer
from pgstatus.model.selection import rendezvous, select_master
from pgstatus.model.status import HostStatus, View
from service import RunningService, blocking, wait_until

CONFIG = load_config({"pg_status__hosts": "m,r1,r2,r3"})


def view(*down: str, lagging: str | None = None) -> View:
    hs = [HostStatus(0, "m", None, None, checked=True, reached=True, alive=True, master=True,
                     lag_ms=0, lag_bytes=0, lsn=100, timeline=1, sync_by_time=True,
                     sync_by_bytes=True)]
    for i, name in enumerate(("r1", "r2", "r3"), start=1):
        alive = name not in down
        lag = 5000 if name == lagging else 10
        hs.append(HostStatus(i, name, None, None, checked=True, reached=True, alive=alive,
                             possible_dead=not alive, lag_ms=lag if alive else None,
                             lag_bytes=0 if alive else None, lsn=100 if alive else None,
                             timeline=1, sync_by_time=alive and lag <= 1000,
                             sync_by_bytes=alive))
    hosts = tuple(hs)
    return View(hosts, select_master(hosts), True, 1)


def answer(v: View, key: str, route: str = "replica", **extra: str) -> str:
    renderer = Renderer(lambda: v, ConfigProvider(CONFIG), "1")
    r = renderer.answer(route, query({"key": key, **extra}), False)
    assert r.status == 200
    return r.body.decode()


def test_same_key_same_replica_and_spread():
    v = view()
    keys = [f"session-{i}" for i in range(3000)]
    first = {k: answer(v, k) for k in keys}
    assert all(answer(v, k) == first[k] for k in keys[:200])
    counts = {n: list(first.values()).count(n) for n in ("r1", "r2", "r3")}
    assert all(800 < c < 1200 for c in counts.values()), counts


def test_only_the_sessions_of_a_leaving_replica_move():
    keys = [f"session-{i}" for i in range(3000)]
    before = {k: answer(view(), k) for k in keys}
    after = {k: answer(view("r2"), k) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(before[k] == "r2" for k in moved)
    assert set(moved) == {k for k in keys if before[k] == "r2"}
    share = len(moved) / len(keys)
    print(f"\nsticky: {share:.1%} of 3000 sessions moved when one of three replicas left")
    assert 0.25 < share < 0.42
    # and they come back when it returns
    assert {k: answer(view(), k) for k in keys} == before


def test_filters_still_apply_with_a_key():
    v = view(lagging="r1")
    for i in range(300):
        assert answer(v, f"k{i}", "sync_by_time") != "r1"


@pytest.mark.parametrize("bad", ["", "x" * 257])
def test_invalid_key(bad):
    renderer = Renderer(lambda: view(), ConfigProvider(CONFIG), "1")
    r = renderer.answer("replica", query({"key": bad}), False)
    assert (r.status, r.body) == (400, b'{"error_text": "Invalid key"}')


def test_rendezvous_is_stable_for_a_group():
    g = view().hosts[1:]
    assert rendezvous(g, "abc") is rendezvous(g, "abc")


@pytest.mark.pg
@pytest_twisted.inlineCallbacks
def test_sticky_key_against_the_real_topology(guarded_topology, reactor):
    """
    Each session key keeps its replica; when that replica stops, its
    sessions move to the other one and the others stay put.
    """
    topo = guarded_topology
    svc = RunningService(reactor, {**topo.hosts_env(), "pg_status__sleep_ms": "200",
                                   "pg_status__query_timeout_ms": "300"})
    try:
        yield wait_until(reactor, lambda: svc.view.ready
                         and all(h.healthy for h in svc.view.hosts), 10, "healthy")
        keys = [f"user-{i}" for i in range(60)]
        first = {}
        for k in keys:
            r = yield svc.get(f"/replica?key={k}")
            first[k] = r.text
        assert set(first.values()) == {n.host for n in topo.replicas}
        for k in keys[:20]:
            r = yield svc.get(f"/replica?key={k}")
            assert r.text == first[k]
        gone = topo.replicas[0]
        yield blocking(gone.stop, "immediate")
        yield wait_until(reactor, lambda: not svc.host(gone.host).alive, 5, "stopped replica dead")
        for k in keys:
            r = yield svc.get(f"/replica?key={k}")
            if first[k] == gone.host:
                assert r.text == topo.replicas[1].host
            else:
                assert r.text == first[k]
    finally:
        yield svc.stop()
