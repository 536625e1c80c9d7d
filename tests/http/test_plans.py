"""
Tests for :mod:`pgstatus.http.plan` through the renderer: a replica query is
parsed and planned once per view, route and format, the plan is a typed
value, and following it (round robin, fallback counts, the ``min_lsn``
wait) needs nothing parsed again.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.http import responses
from pgstatus.http.answer import Response
from pgstatus.http.freshness import FreshReads
from pgstatus.http.memo import MAX_PLANS
from pgstatus.http.params import parse_filters
from pgstatus.http.plan import Fallback, Fixed, Rotate, Wait
from pgstatus.http.responses import Renderer
from pgstatus.model.selection import select_master
from pgstatus.model.status import HostStatus, View

CONFIG = load_config({"pg_status__hosts": "m,r1,r2", "pg_status__sync_max_lag_ms": "100"})


def view(lsn: int = 100, r2_lag_ms: int = 10) -> View:
    """
    A master at 200 and two replicas that replayed ``lsn``.
    """
    hs = [HostStatus(0, "m", None, None, checked=True, reached=True, alive=True, master=True,
                     lag_ms=0, lag_bytes=0, lsn=200, timeline=1, sync_by_time=True,
                     sync_by_bytes=True)]
    for i, lag in ((1, 10), (2, r2_lag_ms)):
        hs.append(HostStatus(i, f"r{i}", None, None, checked=True, reached=True, alive=True,
                             lag_ms=lag, lag_bytes=0, lsn=lsn, timeline=1,
                             sync_by_time=lag <= 100, sync_by_bytes=True))
    hosts = tuple(hs)
    return View(hosts, select_master(hosts), True, 1)


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """
    The queries the renderer parses, in order.
    """
    seen: list[bytes] = []
    parse = responses.parse_query

    def counting(query: bytes) -> dict[str, str]:
        seen.append(query)
        return parse(query)

    monkeypatch.setattr(responses, "parse_query", counting)
    return seen


@pytest.mark.parametrize(("route", "query", "kind"), [
    ("replica", b"", Rotate),
    ("sync_by_time", b"", Fixed),
    ("replica", b"key=session-1", Fixed),
    ("replica", b"lag_ms=x", Fixed),
    ("replica", b"lag_ms=1", Fallback),
])
def test_plans_are_typed_values(route, query, kind):
    """
    The memo keeps one plan per (route, format) and raw query, a frozen
    value of the :data:`~pgstatus.http.plan.Plan` union.
    """
    v = view(r2_lag_ms=500)
    renderer = Renderer(lambda: v, ConfigProvider(CONFIG), "1")
    r = renderer.answer(route, query, False)
    plan = renderer.memo(v).plans[(route, False)][query]
    assert type(plan) is kind
    with pytest.raises(FrozenInstanceError):
        setattr(plan, fields(plan)[0].name, r)
    if kind is Rotate:
        assert plan.key == (1, 2) and r in plan.answers
    elif kind is Fallback:
        assert (plan.response, plan.reason) == (r, "lag")
    else:
        assert plan.response == r


def test_a_query_is_planned_once_per_view_route_and_format(parsed, log_events):
    """
    The same raw query under one view is parsed once, and its fallback
    logged once, however many requests it answers; another format, route
    or view plans afresh.  Each request still counts its fallback.
    """
    v = view()
    renderer = Renderer(lambda: v, ConfigProvider(CONFIG), "1")
    for _ in range(5):
        assert renderer.answer("replica", b"min_lsn=0/C8", False) == Response(
            200, b"text/plain; charset=utf-8", b"m")
    assert parsed == [b"min_lsn=0/C8"]
    assert renderer.fallbacks == {"min_lsn": 5}
    lines = [e for e in log_events if e.get("log_namespace") == "pgstatus.selection"]
    assert len(lines) == 1
    renderer.answer("replica", b"min_lsn=0/C8", True)
    renderer.answer("sync_by_time", b"min_lsn=0/C8", False)
    v = view()
    renderer.answer("replica", b"min_lsn=0/C8", False)
    assert parsed == [b"min_lsn=0/C8"] * 4
    assert renderer.fallbacks == {"min_lsn": 8}


def test_plans_are_bounded_per_route_and_format(parsed):
    """
    Beyond :data:`~pgstatus.http.memo.MAX_PLANS` distinct queries, new ones
    are answered alike but planned for every request.
    """
    v = view()
    renderer = Renderer(lambda: v, ConfigProvider(CONFIG), "1")
    for i in range(MAX_PLANS):
        renderer.answer("replica", f"x={i}".encode(), False)
    assert len(renderer.memo(v).plans[("replica", False)]) == MAX_PLANS
    del parsed[:]
    assert {renderer.answer("replica", b"x=new", False).body for _ in range(4)} == {b"r1", b"r2"}
    assert parsed == [b"x=new"] * 4
    renderer.answer("replica", b"x=new", True)
    assert b"x=new" in renderer.memo(v).plans[("replica", True)]


def test_wait_plan_carries_what_the_wait_needs(parsed):
    """
    A ``min_lsn`` request no replica satisfies yet, with a wait: the plan
    holds the parsed filters, key, wait and the replicas behind; each
    request waits without parsing again, asks for checks of those replicas,
    and is answered from the first view that satisfies it.
    """
    clock, checks = Clock(), []
    fresh = FreshReads(clock, checks.append)
    current = [view()]
    renderer = Renderer(lambda: current[0], ConfigProvider(CONFIG), "1", fresh)
    query = b"min_lsn=0/96&wait_ms=500"
    first = renderer.answer("sync_by_time", query, True)
    second = renderer.answer("sync_by_time", query, True)
    assert isinstance(first, Deferred) and isinstance(second, Deferred)
    assert parsed == [query]
    filters = parse_filters("sync_by_time", {"min_lsn": "0/96"}, CONFIG)
    assert filters.min_lsn == 0x96
    assert renderer.memo(current[0]).plans[("sync_by_time", True)][query] == Wait(
        "sync_by_time", filters, None, 500, (1, 2), True)
    assert checks == [1, 2, 1, 2]
    got: list[Response] = []
    first.addCallback(got.append)
    second.addCallback(got.append)
    old, current[0] = current[0], view(lsn=0x96)
    fresh.published(old, current[0])
    assert [r.body for r in got] == [b'{"host": "r1", "dc": null, "geo": null}',
                                     b'{"host": "r2", "dc": null, "geo": null}']
    assert renderer.fallbacks == {}


def test_wait_ends_with_the_master_and_counts_the_fallback():
    """
    A wait no view satisfies ends with the master, counted as a fallback.
    """
    clock = Clock()
    v = view()
    renderer = Renderer(lambda: v, ConfigProvider(CONFIG), "1", FreshReads(clock, lambda i: None))
    d = renderer.answer("replica", b"min_lsn=0/96&wait_ms=300", False)
    assert isinstance(d, Deferred)
    got: list[Response] = []
    d.addCallback(got.append)
    clock.advance(0.299)
    assert got == []
    clock.advance(0.001)
    assert [r.body for r in got] == [b"m"]
    assert renderer.fallbacks == {"min_lsn": 1}


def test_long_queries_are_planned_but_not_kept():
    """
    A replica query longer than any the API needs is answered as any other
    but its plan is not kept: distinct 8 kB queries (the most a head the
    answer cache takes can carry) would otherwise hold ~80 MB per view
    (1,024 plans per route and format).
    """
    import gc
    import tracemalloc

    v = view()
    renderer = Renderer(lambda: v, ConfigProvider(CONFIG), "1")
    assert renderer.answer("replica", b"x=" + b"1" * 8000, False).body in (b"r1", b"r2")
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(500):
            renderer.answer("replica", b"x=%05d" % i + b"1" * 8000, False)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1024 * 1024
    renderer.answer("replica", b"x=1", False)
    assert b"x=1" in renderer.memo(v).plans[("replica", False)]
