"""
Property tests: arbitrary query strings, headers and host states never
make an endpoint fail, and the chosen replica always satisfies every
filter; the master is returned only when no replica does.
"""

from __future__ import annotations

import json

from http_apis import query
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.http.answer import JSON, TEXT
from pgstatus.http.params import REPLICA_ROUTES, parse_filters, wants_json
from pgstatus.http.params import parse_query as query_args
from pgstatus.http.responses import Renderer
from pgstatus.model.selection import candidates, matches, select_master
from pgstatus.model.status import HostStatus, View

CONFIG = load_config({
    "pg_status__hosts": "h0,h1,h2,h3,h4",
    "pg_status__hosts_dc": "a,b,a,b,a",
    "pg_status__current_dc": "a",
})

maybe_int = st.one_of(st.none(), st.integers(0, 10**7))


@st.composite
def host_status(draw, index: int) -> HostStatus:
    checked = draw(st.booleans())
    alive = checked and draw(st.booleans())
    possible_dead = (not alive and checked) or (alive and draw(st.booleans()))
    master = alive and draw(st.booleans())
    lag_ms = 0 if master else (draw(maybe_int) if alive else None)
    lag_bytes = 0 if master else (draw(maybe_int) if alive else None)
    return HostStatus(
        index, f"h{index}", "ab"[index % 2] if index != 4 else "a", None,
        checked=checked, reached=checked, alive=alive, possible_dead=possible_dead,
        master=master, lag_ms=lag_ms, lag_bytes=lag_bytes,
        lsn=draw(maybe_int) if alive else None,
        timeline=draw(st.one_of(st.none(), st.integers(1, 3))) if alive else None,
        sync_by_time=lag_ms is not None and lag_ms <= 1000,
        sync_by_bytes=lag_bytes is not None and lag_bytes <= 10**6,
    )


@st.composite
def views(draw) -> View:
    hosts = tuple(draw(host_status(i)) for i in range(5))
    return View(hosts, select_master(hosts), True, 1)


query_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
param_value = st.one_of(
    st.integers(-5, 10**20).map(str), query_text,
    st.builds(lambda a, b: f"{a:X}/{b:X}", st.integers(0, 2**33), st.integers(0, 2**33)),
)
params = st.dictionaries(
    st.sampled_from(["lag_ms", "lag_bytes", "min_lsn", "timeline", "wait_ms", "host", "x"]),
    param_value, max_size=5)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(views(), st.sampled_from(sorted(REPLICA_ROUTES)), params, st.booleans())
def test_replica_routes_never_fail(view, route, args, as_json):
    """
    Whatever the parameters and host states, a replica route gives one of
    its documented answers: 200 with a configured host's name (text) or
    its ``{"host", "dc", "geo"}`` object (JSON); 404 with an empty body (or
    the object of nulls); 400 ``{"error_text": "Invalid <name>"}`` naming a
    parameter of the request.
    """
    r = Renderer(lambda: view, ConfigProvider(CONFIG), "1").answer(route, query(args), as_json)
    names = {h.name: h for h in view.hosts}
    if r.status == 400:
        assert r.content_type == JSON
        error = json.loads(r.body)
        assert list(error) == ["error_text"]
        assert error["error_text"].removeprefix("Invalid ") in args, (error, args)
        return
    assert r.status in (200, 404), r
    if as_json:
        assert r.content_type == JSON
        host = json.loads(r.body)
        assert list(host) == ["host", "dc", "geo"]
        if r.status == 404:
            assert host == {"host": None, "dc": None, "geo": None}
        else:
            chosen = names[host["host"]]
            assert (host["dc"], host["geo"]) == (chosen.dc, chosen.geo)
    elif r.status == 404:
        assert (r.content_type, r.body) == (None, b"")
    else:
        assert r.content_type == TEXT
        assert r.body.decode() in names


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_raw_query_strings_parse(query):
    args = query_args(query)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in args.items())


@settings(max_examples=300)
@given(st.text(max_size=80))
def test_accept_header_never_fails(accept):
    """
    Any ``Accept`` text: JSON only if it names ``application/json``; one
    more media type in the list changes nothing, and ``application/json``
    added to it always means JSON.
    """
    as_json = wants_json(accept)
    if as_json:
        assert "application/json" in accept.lower()
    assert wants_json(f"{accept},text/plain") is as_json
    assert wants_json(f"{accept}, application/json") is True


media_range = st.builds(
    lambda media, params, before, after: f"{before}{media}{params}{after}",
    st.one_of(
        st.sampled_from(["text/plain", "text/html", "*/*", "application/*", "application/xml",
                         "application/jsonx", "application/problem+json", "text/json",
                         "json"]),
        st.sampled_from(["application/json", "APPLICATION/JSON", "Application/Json"]),
    ),
    st.sampled_from(["", ";q=0.9", "; charset=utf-8", ";level=1;q=0.5"]),
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["", " "]),
)


@settings(max_examples=300)
@given(st.lists(media_range, min_size=1, max_size=5))
def test_accept_header_lists_application_json(ranges):
    """
    An ``Accept`` list asks for JSON exactly when one of its media ranges,
    parameters aside and in any case, is ``application/json``.
    """
    listed = any(r.split(";")[0].strip().lower() == "application/json" for r in ranges)
    assert wants_json(",".join(ranges)) is listed


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(views(), st.sampled_from(sorted(REPLICA_ROUTES)), params)
def test_choice_satisfies_filters_and_falls_back_only_when_needed(view, route, args):
    """
    The answer is a live replica passing every filter, from the best health
    tier; the master only when no replica passes; 404 only without master.
    """
    renderer = Renderer(lambda: view, ConfigProvider(CONFIG), "1")
    r = renderer.answer(route, query({k: v for k, v in args.items() if k != "wait_ms"}), False)
    if r.status == 400:
        return
    f = parse_filters(route, args, CONFIG)
    passing = [h for h in view.hosts if h.alive and not h.master and matches(h, f, view.master)]
    if route == "most_sync_by_bytes":
        passing = [h for h in passing if h.lag_bytes is not None]
    if not passing:
        if view.master is None:
            assert r.status == 404 and r.body == b""
        else:
            assert r.body.decode() == view.master.name
        return
    name = r.body.decode()
    chosen = next(h for h in view.hosts if h.name == name)
    assert chosen in passing
    if any(h.healthy for h in passing):
        assert chosen.healthy
    assert set(candidates(view.hosts, f, view.master)) <= set(passing)
