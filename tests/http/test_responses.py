"""
Tests for :mod:`pgstatus.http.responses`: every endpoint rendered end to end
from hand-built views, parameter parsing, ``Accept`` handling and LSN
formatting.

No reactor and no HTTP: a :class:`~pgstatus.http.responses.Renderer` reads a
:class:`~pgstatus.model.status.View` the test sets.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from http_apis import query
from hypothesis import given
from hypothesis import strategies as st

from pgstatus.config.environ import load_config
from pgstatus.config.provider import ConfigProvider
from pgstatus.config.settings import HostConfig
from pgstatus.http.answer import JSON, TEXT, Response
from pgstatus.http.params import (
    REPLICA_ROUTES,
    BadParameter,
    format_lsn,
    parse_lag,
    parse_lsn,
    parse_timeline,
    wants_json,
)
from pgstatus.http.responses import Renderer
from pgstatus.model.selection import select_master
from pgstatus.model.status import HostStatus, View
from pgstatus.monitor.registry import Registry

P = "pg_status__"
LSN = 0x3000060
NOT_READY_BODY = b'{"error_text": "pg_monitor is not ready"}'
HOST_FIELDS = [
    "host", "dc", "geo", "master", "alive", "possible_dead",
    "lag_ms", "sync_by_time", "lag_bytes", "sync_by_bytes", "lsn",
]


def config(hosts: str = "m,a,b", **values: str):
    """
    A configuration with thresholds lag_ms 100 and lag_bytes 100 unless
    overridden, plus ``pg_status__<key>=<value>``.
    """
    env = {P + "hosts": hosts, P + "sync_max_lag_ms": "100", P + "sync_max_lag_bytes": "100"}
    env.update({P + k: v for k, v in values.items()})
    return load_config(env)


def master(i: int, name: str, *, possible_dead: bool = False, lsn: int | None = LSN,
           timeline: int | None = 1, dc: str | None = None, geo: str | None = None
           ) -> HostStatus:
    """
    A live master.
    """
    return HostStatus(
        i, name, dc, geo, checked=True, reached=True, alive=True, possible_dead=possible_dead,
        master=True, lag_ms=0, lag_bytes=0, lsn=lsn, timeline=timeline,
        sync_by_time=True, sync_by_bytes=True,
    )


def replica(i: int, name: str, *, lag_ms: int | None = 0, lag_bytes: int | None = 0,
            lsn: int | None = LSN, timeline: int | None = 1, possible_dead: bool = False,
            dc: str | None = None, geo: str | None = None) -> HostStatus:
    """
    A live replica; sync flags against thresholds of 100.
    """
    return HostStatus(
        i, name, dc, geo, checked=True, reached=True, alive=True, possible_dead=possible_dead,
        master=False, lag_ms=lag_ms, lag_bytes=lag_bytes, lsn=lsn, timeline=timeline,
        sync_by_time=lag_ms is not None and lag_ms <= 100,
        sync_by_bytes=lag_bytes is not None and lag_bytes <= 100,
    )


def dead(i: int, name: str, dc: str | None = None, geo: str | None = None) -> HostStatus:
    """
    A dead host.
    """
    return HostStatus(i, name, dc, geo, checked=True, reached=True, alive=False,
                      possible_dead=True)


def view(*hosts: HostStatus, ready: bool = True) -> View:
    """
    A published view of ``hosts`` with the master selected from them.
    """
    return View(tuple(hosts), select_master(hosts), ready=ready, generation=1)


class Fixture:
    """
    A renderer over a view the test can replace.
    """

    def __init__(self, v: View, cfg=None) -> None:
        self.view = v
        self.renderer = Renderer(lambda: self.view, ConfigProvider(cfg or config()), "1.2.3")

    def replica(self, route: str, args: dict | None = None, as_json: bool = False) -> Response:
        return self.renderer.answer(route, query(args), as_json)

    def bodies(self, route: str, args: dict | None = None, n: int = 8) -> set[str]:
        """
        The distinct host names ``n`` requests return, each checked to be a
        200 plain-text answer.
        """
        out = set()
        for _ in range(n):
            r = self.replica(route, args)
            assert r.status == 200, r
            assert r.content_type == TEXT
            out.add(r.body.decode())
        return out


def test_response_equal_by_value_hashed_by_identity():
    """
    Responses compare by their fields, but hash as objects: the HTTP layer
    keys its per-response memos by the memoised object.
    """
    a, b = Response(200, TEXT, b"OK"), Response(200, TEXT, b"OK")
    assert a == b and a != Response(200, TEXT, b"KO")
    assert hash(a) == object.__hash__(a) != hash(b)


# ---------------------------------------------------------------------------
# Readiness


NOT_READY_VIEW = view(master(0, "m"), replica(1, "a"), ready=False)


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda r, j: r.master(j), id="master"),
        pytest.param(lambda r, j: r.hosts(), id="hosts"),
        pytest.param(lambda r, j: r.status("a"), id="status"),
        pytest.param(lambda r, j: r.status(None), id="status-without-host"),
        pytest.param(lambda r, j: r.status("unknown"), id="status-unknown-host"),
        pytest.param(lambda r, j: r.ready(), id="ready"),
    ]
    + [
        pytest.param(lambda r, j, route=route: r.answer(route, b"", j), id=route)
        for route in sorted(REPLICA_ROUTES)
    ]
    + [
        pytest.param(
            lambda r, j, route=route: r.answer(
                route,
                query({"lag_ms": "-1", "lag_bytes": "x", "min_lsn": "?", "timeline": "0"}),
                j,
            ),
            id=f"{route}-invalid-params",
        )
        for route in sorted(REPLICA_ROUTES)
    ],
)
def test_not_ready_is_503_before_anything_else(call, as_json):
    """
    Until every host has been checked, /ready and all host endpoints answer
    503 with the not-ready error, whatever the Accept header and even with
    invalid parameters.
    """
    f = Fixture(NOT_READY_VIEW)
    r = call(f.renderer, as_json)
    assert r == Response(503, JSON, NOT_READY_BODY)


def test_live_and_version_answer_before_ready():
    """
    /live and /version answer at once, ready or not.
    """
    f = Fixture(NOT_READY_VIEW)
    assert f.renderer.live() == Response(200, TEXT, b"OK")
    assert f.renderer.version == Response(200, TEXT, b"1.2.3")


def test_ready_once_ready_even_without_master():
    """
    /ready is OK once the view is ready, even with every host dead.
    """
    f = Fixture(view(dead(0, "m"), dead(1, "a")))
    assert f.renderer.ready() == Response(200, TEXT, b"OK")


# ---------------------------------------------------------------------------
# /master


def test_master_text_and_json():
    """
    /master: the host name as text, or host/dc/geo as JSON.
    """
    f = Fixture(view(replica(0, "a"), master(1, "m", dc="fra", geo="eu")))
    assert f.renderer.master(False) == Response(200, TEXT, b"m")
    r = f.renderer.master(True)
    assert (r.status, r.content_type) == (200, JSON)
    assert list(json.loads(r.body).items()) == [("host", "m"), ("dc", "fra"), ("geo", "eu")]


def test_master_json_null_locality():
    """
    Unconfigured locality is null in the JSON answer.
    """
    f = Fixture(view(master(0, "m")))
    assert json.loads(f.renderer.master(True).body) == {"host": "m", "dc": None, "geo": None}


def test_master_possibly_dead_still_returned():
    """
    A possibly dead master is still the master when no healthy one exists.
    """
    f = Fixture(view(master(0, "m", possible_dead=True), replica(1, "a")))
    assert f.renderer.master(False).body == b"m"


@pytest.mark.parametrize(
    "hosts",
    [
        pytest.param((dead(0, "m"), replica(1, "a")), id="master-dead"),
        pytest.param((replica(0, "a"), replica(1, "b")), id="replicas-only"),
        pytest.param((), id="no-hosts"),
    ],
)
def test_master_404(hosts):
    """
    No master: 404 with an empty body (no content type), or the JSON nulls.
    """
    f = Fixture(view(*hosts))
    assert f.renderer.master(False) == Response(404, None, b"")
    r = f.renderer.master(True)
    assert (r.status, r.content_type) == (404, JSON)
    assert list(json.loads(r.body).items()) == [("host", None), ("dc", None), ("geo", None)]


# ---------------------------------------------------------------------------
# Replica routes: which parameters each route reads, and their defaults

#: a: fresh by time, stale by bytes; b: the opposite.  Thresholds: 100 / 100.
SPLIT = (
    master(0, "m"),
    replica(1, "a", lag_ms=50, lag_bytes=5000),
    replica(2, "b", lag_ms=5000, lag_bytes=50),
)


@pytest.mark.parametrize(
    ("route", "args", "expected"),
    [
        # /replica: omitted = no constraint
        ("replica", {}, {"a", "b"}),
        ("replica", {"lag_ms": "100"}, {"a"}),
        ("replica", {"lag_ms": "49"}, {"m"}),
        ("replica", {"lag_bytes": "100"}, {"b"}),
        ("replica", {"lag_ms": "100", "lag_bytes": "100"}, {"m"}),
        ("replica", {"lag_ms": "5000", "lag_bytes": "5000"}, {"a", "b"}),
        ("replica", {"lag_ms": "0"}, {"m"}),
        # /sync_by_time: lag_ms or the global 100; lag_bytes has no effect
        ("sync_by_time", {}, {"a"}),
        ("sync_by_time", {"lag_ms": "5000"}, {"a", "b"}),
        ("sync_by_time", {"lag_ms": "10"}, {"m"}),
        ("sync_by_time", {"lag_bytes": "0"}, {"a"}),
        ("sync_by_time", {"lag_ms": "5000", "lag_bytes": "0"}, {"a", "b"}),
        # /sync_by_bytes: lag_bytes or the global 100; lag_ms has no effect
        ("sync_by_bytes", {}, {"b"}),
        ("sync_by_bytes", {"lag_bytes": "5000"}, {"a", "b"}),
        ("sync_by_bytes", {"lag_bytes": "10"}, {"m"}),
        ("sync_by_bytes", {"lag_ms": "0"}, {"b"}),
        # /sync_by_time_or_bytes
        ("sync_by_time_or_bytes", {}, {"a", "b"}),
        ("sync_by_time_or_bytes", {"lag_ms": "10"}, {"b"}),
        ("sync_by_time_or_bytes", {"lag_bytes": "10"}, {"a"}),
        ("sync_by_time_or_bytes", {"lag_ms": "10", "lag_bytes": "10"}, {"m"}),
        # /sync_by_time_and_bytes
        ("sync_by_time_and_bytes", {}, {"m"}),
        ("sync_by_time_and_bytes", {"lag_ms": "5000"}, {"b"}),
        ("sync_by_time_and_bytes", {"lag_bytes": "5000"}, {"a"}),
        ("sync_by_time_and_bytes", {"lag_ms": "5000", "lag_bytes": "5000"}, {"a", "b"}),
        # /most_sync_by_bytes: lag_bytes or the global 100; lag_ms has no effect
        ("most_sync_by_bytes", {}, {"b"}),
        ("most_sync_by_bytes", {"lag_bytes": "5000"}, {"b"}),
        ("most_sync_by_bytes", {"lag_bytes": "49"}, {"m"}),
        ("most_sync_by_bytes", {"lag_ms": "0"}, {"b"}),
    ],
)
def test_route_parameters_and_defaults(route, args, expected):
    """
    Each route reads only its lag parameters; an omitted one means no
    constraint on /replica and the global threshold elsewhere; with no
    match the master is returned.
    """
    assert Fixture(view(*SPLIT)).bodies(route, args) == expected


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("replica", {"a", "b", "u"}),
        ("sync_by_time", {"a", "b"}),
        ("sync_by_bytes", {"a", "b"}),
        ("sync_by_time_or_bytes", {"a", "b"}),
        ("sync_by_time_and_bytes", {"a", "b"}),
        ("most_sync_by_bytes", {"a"}),
    ],
)
def test_unknown_lags_only_without_limit(route, expected):
    """
    A replica whose lags cannot be measured meets no threshold: only
    /replica without parameters can return it.
    """
    hosts = (
        master(0, "m"),
        replica(1, "a", lag_ms=1, lag_bytes=1),
        replica(2, "b", lag_ms=1, lag_bytes=1),
        replica(3, "u", lag_ms=None, lag_bytes=None),
    )
    f = Fixture(view(*hosts), config("m,a,b,u"))
    assert f.bodies(route, n=12) == expected
    assert "u" not in f.bodies(route, {"lag_ms": "1000000", "lag_bytes": "1000000"})


def test_replica_skips_master_and_dead():
    """
    /replica never returns the master, another master or a dead host.
    """
    hosts = (master(0, "m"), master(1, "m2"), dead(2, "d"), replica(3, "a"))
    f = Fixture(view(*hosts), config("m,m2,d,a"))
    assert f.bodies("replica") == {"a"}


@pytest.mark.parametrize("route", sorted(REPLICA_ROUTES))
def test_fallback_to_master(route):
    """
    Every replica route falls back to the master when no replica matches.
    """
    f = Fixture(view(master(0, "m", dc="fra", geo="eu"), dead(1, "a"), dead(2, "b")))
    assert f.replica(route) == Response(200, TEXT, b"m")
    r = f.replica(route, as_json=True)
    assert (r.status, r.content_type) == (200, JSON)
    assert json.loads(r.body) == {"host": "m", "dc": "fra", "geo": "eu"}


@pytest.mark.parametrize("route", sorted(REPLICA_ROUTES))
def test_no_replica_no_master_404(route):
    """
    With neither a matching replica nor a master: 404, empty body or JSON
    nulls.
    """
    f = Fixture(view(dead(0, "m"), replica(1, "a", lag_ms=None, lag_bytes=None)))
    args = {"min_lsn": "FFFFFFFF/FFFFFFFF"}
    assert f.replica(route, args) == Response(404, None, b"")
    r = f.replica(route, args, as_json=True)
    assert (r.status, r.content_type) == (404, JSON)
    assert list(json.loads(r.body).items()) == [("host", None), ("dc", None), ("geo", None)]


def test_replica_json_shape():
    """
    A replica as JSON: host, dc and geo in that order.
    """
    hosts = (master(0, "m"), replica(1, "a", dc="ams", geo="eu"))
    r = Fixture(view(*hosts)).replica("replica", as_json=True)
    assert (r.status, r.content_type) == (200, JSON)
    assert list(json.loads(r.body).items()) == [("host", "a"), ("dc", "ams"), ("geo", "eu")]


def test_replica_without_master_still_served():
    """
    Replicas are returned even when no master is selected.
    """
    f = Fixture(view(dead(0, "m"), replica(1, "a"), replica(2, "b")))
    assert f.bodies("replica") == {"a", "b"}


def test_possibly_dead_replica_only_when_no_healthy_matches():
    """
    A possibly dead replica is returned only when no healthy one matches.
    """
    hosts = (
        master(0, "m"),
        replica(1, "a", lag_ms=10, possible_dead=True),
        replica(2, "b", lag_ms=500),
    )
    f = Fixture(view(*hosts))
    assert f.bodies("replica") == {"b"}
    assert f.bodies("sync_by_time") == {"a"}


def test_most_sync_prefers_healthy_replica():
    """
    /most_sync_by_bytes also prefers a healthy replica over a possibly dead
    one with a smaller byte lag, and uses the possibly dead one otherwise.
    """
    hosts = (
        master(0, "m"),
        replica(1, "a", lag_bytes=1, possible_dead=True),
        replica(2, "b", lag_bytes=50),
    )
    f = Fixture(view(*hosts))
    assert f.bodies("most_sync_by_bytes") == {"b"}
    assert f.bodies("most_sync_by_bytes", {"lag_bytes": "10"}) == {"a"}


def test_possibly_dead_uses_last_measured_lags():
    """
    A possibly dead replica keeps its last lags, so a failed check does not
    make a lagging replica look synchronous.
    """
    hosts = (master(0, "m"), replica(1, "a", lag_ms=5000, lag_bytes=5000, possible_dead=True))
    f = Fixture(view(*hosts), config("m,a"))
    for route in sorted(REPLICA_ROUTES - {"replica"}):
        assert f.bodies(route) == {"m"}
    assert f.bodies("replica") == {"a"}


# ---------------------------------------------------------------------------
# min_lsn and timeline through the renderer


RYW = (
    master(0, "m", lsn=0x3000100, timeline=2),
    replica(1, "old", lsn=0x3000080, timeline=1),
    replica(2, "fresh", lsn=0x3000060, timeline=2),
    replica(3, "behind", lsn=0x3000000, timeline=2),
    replica(4, "unknown-tl", lsn=0x3000070, timeline=None),
)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"min_lsn": "0/3000060"}, {"fresh", "unknown-tl"}),
        ({"min_lsn": "0/3000061"}, {"unknown-tl"}),
        ({"min_lsn": "0/3000071"}, {"m"}),
        ({"min_lsn": "0/3000060", "timeline": "2"}, {"fresh"}),
        ({"timeline": "2"}, {"fresh", "behind"}),
        ({"timeline": "1"}, {"m"}),
        ({"timeline": "3"}, {"m"}),
        ({"min_lsn": "0/0"}, {"fresh", "behind", "unknown-tl"}),
        ({"min_lsn": "0/3000060", "lag_ms": "0"}, {"fresh", "unknown-tl"}),
    ],
)
def test_read_your_writes(args, expected):
    """
    min_lsn keeps replicas that replayed the position on the master's
    timeline (or of unknown timeline); timeline keeps replicas known to be
    on it, none once the master is on a later one.
    """
    f = Fixture(view(*RYW), config("m,old,fresh,behind,unknown-tl"))
    assert f.bodies("replica", args, n=10) == expected


@pytest.mark.parametrize("route", sorted(REPLICA_ROUTES))
def test_min_lsn_on_every_route(route):
    """
    min_lsn is accepted by every replica route and combined with its lag
    filter.
    """
    hosts = (master(0, "m"), replica(1, "a", lsn=0x450, lag_ms=1, lag_bytes=1))
    f = Fixture(view(*hosts), config("m,a"))
    assert f.bodies(route, {"min_lsn": "0/450"}) == {"a"}
    assert f.bodies(route, {"min_lsn": "0/451"}) == {"m"}
    assert f.bodies(route, {"timeline": "1"}) == {"a"}
    assert f.bodies(route, {"timeline": "2"}) == {"m"}


# ---------------------------------------------------------------------------
# Parameter validation


BAD_INTEGERS = ["-1", "1.5", "", "abc", " 1", "1 ", "+1", "0x10", "1e3", "１", "٣", "1_000"]


def _uses(route: str, param: str) -> bool:
    if param == "lag_ms":
        return route not in ("sync_by_bytes", "most_sync_by_bytes")
    return route != "sync_by_time"


@pytest.mark.parametrize("value", BAD_INTEGERS)
@pytest.mark.parametrize(
    ("route", "param"),
    [
        (route, param)
        for route in sorted(REPLICA_ROUTES)
        for param in ("lag_ms", "lag_bytes")
        if _uses(route, param)
    ],
)
def test_invalid_lag(route, param, value):
    """
    A lag parameter that is not a non-negative integer is a 400 with
    ``{"error_text": "Invalid <param>"}``, whatever the Accept header.
    """
    f = Fixture(view(*SPLIT))
    expected = Response(400, JSON, f'{{"error_text": "Invalid {param}"}}'.encode())
    assert f.replica(route, {param: value}) == expected
    assert f.replica(route, {param: value}, as_json=True) == expected


@pytest.mark.parametrize(
    ("route", "param"),
    [("sync_by_time", "lag_bytes"), ("sync_by_bytes", "lag_ms"),
     ("most_sync_by_bytes", "lag_ms")],
)
def test_invalid_unused_lag_is_still_400(route, param):
    """
    Every replica endpoint accepts both lag parameters and rejects invalid
    values, even the one that has no effect on its selection (the original
    service validates both on every route).
    """
    f = Fixture(view(*SPLIT))
    expected = Response(400, JSON, f'{{"error_text": "Invalid {param}"}}'.encode())
    assert f.replica(route, {param: "abc"}) == expected


@pytest.mark.parametrize("value", ["0", "00", "007", "100", "18446744073709551615",
                                   "000000000000000000000000018446744073709551615"])
def test_valid_lag_values(value):
    """
    Any non-negative decimal integer up to 2**64-1 is accepted, leading
    zeros included.
    """
    f = Fixture(view(*SPLIT))
    r = f.replica("replica", {"lag_ms": value, "lag_bytes": value})
    assert r.status == 200


@pytest.mark.parametrize("param", ["lag_ms", "lag_bytes"])
def test_very_long_lag_value_does_not_crash(param):
    """
    A 5000-digit lag is either a (huge) valid limit or a 400, never an
    exception.  (Beyond 2**64-1 it is a 400, as in the original.)
    """
    f = Fixture(view(*SPLIT))
    r = f.replica("replica", {param: "9" * 5000})
    assert r.status in (200, 400)
    if r.status == 400:
        assert r.body == f'{{"error_text": "Invalid {param}"}}'.encode()


@pytest.mark.parametrize(
    "value",
    ["0/", "/0", "/", "", "0", "100", "123456789/1", "1/123456789", "0/3000060/1",
     "g/1", "1/g", " 0/1", "0/1 ", "0x0/1", "-1/1", "+1/1", "0//1", "0 /1", "０/1"],
)
@pytest.mark.parametrize("route", sorted(REPLICA_ROUTES))
def test_invalid_min_lsn(route, value):
    """
    An LSN that is not HEX/HEX with 1 to 8 digits each side is a 400.
    """
    f = Fixture(view(*SPLIT))
    assert f.replica(route, {"min_lsn": value}) == Response(
        400, JSON, b'{"error_text": "Invalid min_lsn"}'
    )


@pytest.mark.parametrize(
    ("value", "lsn"),
    [
        ("0/3000060", 0x3000060),
        ("0/0", 0),
        ("0/3000060".lower(), 0x3000060),
        ("0/2fffe98", 0x2FFFE98),
        ("0/2FFFE98", 0x2FFFE98),
        ("1/0", 1 << 32),
        ("aBcDeF01/FfFfFfFf", (0xABCDEF01 << 32) | 0xFFFFFFFF),
        ("FFFFFFFF/FFFFFFFF", 2**64 - 1),
        ("00000000/00000001", 1),
        ("12345678/9", (0x12345678 << 32) | 9),
    ],
)
def test_parse_lsn_valid(value, lsn):
    """
    PostgreSQL LSNs, lower or upper case hex, parse to 64-bit positions.
    """
    assert parse_lsn(value) == lsn


@pytest.mark.parametrize(
    "value", ["0", "4294967296", "-1", "", "abc", "1.0", "+1", " 1", "1 ",
              "99999999999999999999", "0x1", "１"],
)
@pytest.mark.parametrize("route", sorted(REPLICA_ROUTES))
def test_invalid_timeline(route, value):
    """
    A timeline outside 1..4294967295, or not a plain number, is a 400.
    """
    f = Fixture(view(*SPLIT))
    assert f.replica(route, {"timeline": value}) == Response(
        400, JSON, b'{"error_text": "Invalid timeline"}'
    )


@pytest.mark.parametrize(("value", "n"), [("1", 1), ("2", 2), ("4294967295", 4294967295),
                                          ("01", 1)])
def test_parse_timeline_valid(value, n):
    """
    1 to 4294967295 are timelines.
    """
    assert parse_timeline(value) == n


def test_timeline_max_accepted_by_route():
    """
    The largest timeline is accepted end to end (no replica is on it, so
    the master answers).
    """
    f = Fixture(view(*SPLIT))
    assert f.replica("replica", {"timeline": "4294967295"}) == Response(200, TEXT, b"m")


@given(st.integers(0, 10**30), st.integers(0, 5))
def test_parse_lag_property(n, zeros):
    """
    Any decimal non-negative integer up to 2**64-1, with leading zeros,
    parses to its value (capped at the largest 64-bit signed integer);
    larger ones are invalid.
    """
    text = "0" * zeros + str(n)
    if n > 2**64 - 1:
        with pytest.raises(BadParameter, match="^Invalid lag_ms$"):
            parse_lag(text, "lag_ms")
    else:
        assert parse_lag(text, "lag_ms") == min(n, 2**63 - 1)


def test_parse_helpers_raise_bad_parameter():
    """
    The parsers raise :class:`BadParameter` whose text is the error text.
    """
    with pytest.raises(BadParameter, match="^Invalid lag_bytes$"):
        parse_lag("x", "lag_bytes")
    with pytest.raises(BadParameter, match="^Invalid min_lsn$"):
        parse_lsn("x")
    with pytest.raises(BadParameter, match="^Invalid timeline$"):
        parse_timeline("0")


# ---------------------------------------------------------------------------
# Locality and round-robin through the renderer


LOCALITY = dict(hosts_dc="fra,fra,ams,nyc,fra", hosts_geo="eu,eu,eu,us,eu",
                current_dc="fra", current_geo="eu")
LOCAL_HOSTS = (
    master(0, "m", dc="fra", geo="eu"),
    replica(1, "fra-1", lag_ms=10, lag_bytes=500, dc="fra", geo="eu"),
    replica(2, "ams-1", lag_ms=10, lag_bytes=10, dc="ams", geo="eu"),
    replica(3, "nyc-1", lag_ms=10, lag_bytes=1, dc="nyc", geo="us"),
    replica(4, "fra-2", lag_ms=500, lag_bytes=500, dc="fra", geo="eu"),
)


@pytest.mark.parametrize(
    ("route", "args", "expected"),
    [
        ("replica", {}, {"fra-1", "fra-2"}),
        ("sync_by_time", {}, {"fra-1"}),
        ("sync_by_bytes", {}, {"ams-1"}),
        ("sync_by_time_and_bytes", {}, {"ams-1"}),
        ("sync_by_time_or_bytes", {}, {"fra-1"}),
        ("replica", {"lag_bytes": "5"}, {"nyc-1"}),
        ("most_sync_by_bytes", {}, {"nyc-1"}),
        ("most_sync_by_bytes", {"lag_bytes": "1000"}, {"nyc-1"}),
    ],
)
def test_locality_preference(route, args, expected):
    """
    Replicas of the current DC, else of the current geo, else any; locality
    never admits a replica that fails the filters; /most_sync_by_bytes
    ignores locality.
    """
    cfg = config("m,fra-1,ams-1,nyc-1,fra-2", **LOCALITY)
    assert cfg.use_dc and cfg.use_geo
    f = Fixture(view(*LOCAL_HOSTS), cfg)
    assert f.bodies(route, args) == expected


def test_partial_locality_is_not_used():
    """
    A DC dimension missing a host's value is ignored; the complete geo
    dimension still applies.
    """
    cfg = config("m,fra-1,ams-1,nyc-1,fra-2", hosts_dc="fra,fra,,nyc,fra",
                 hosts_geo="eu,eu,eu,us,eu", current_dc="ams", current_geo="eu")
    assert not cfg.use_dc and cfg.use_geo
    f = Fixture(view(*LOCAL_HOSTS), cfg)
    assert f.bodies("replica") == {"fra-1", "ams-1", "fra-2"}


def test_round_robin_fair_across_requests_and_views():
    """
    Repeated requests rotate evenly, and a new view with the same eligible
    replicas continues the rotation.
    """
    hosts = (master(0, "m"), replica(1, "a"), replica(2, "b"), replica(3, "c"))
    f = Fixture(view(*hosts), config("m,a,b,c"))
    seen = []
    for i in range(30):
        if i % 7 == 0:
            f.view = view(*hosts)
        seen.append(f.replica("replica").body)
    counts = {b: seen.count(b) for b in set(seen)}
    assert set(counts) == {b"a", b"b", b"c"}
    assert max(counts.values()) - min(counts.values()) <= 1


def test_master_fallback_does_not_consume_a_turn():
    """
    A request answered by the master leaves the replica rotation alone.
    """
    hosts = (master(0, "m"), replica(1, "a", lag_ms=5), replica(2, "b", lag_ms=5))
    f = Fixture(view(*hosts))
    seen = []
    for _ in range(10):
        seen.append(f.replica("replica").body)
        assert f.replica("replica", {"lag_ms": "1"}).body == b"m"
    assert seen.count(b"a") == seen.count(b"b") == 5


# ---------------------------------------------------------------------------
# /hosts and /status


class _Host:
    """
    One host's check results, recorded through a registry as the monitor
    records them, so the null rules are the registry's.
    """

    def __init__(self, cfg, i, name, dc=None, geo=None) -> None:
        self._index = i
        self._registry = Registry(ConfigProvider(
            replace(cfg, hosts=(HostConfig(name, 5432, dc, geo),))))
        self._state = self._registry.states[0]

    def succeeded(self, **result) -> None:
        self._registry.record_success(self._state, **result)

    def failed(self) -> None:
        self._registry.record_failure(self._state)

    def status(self, cfg) -> HostStatus:
        return replace(self._registry.view.hosts[0], index=self._index)


def _state(cfg, i, name, dc=None, geo=None) -> _Host:
    return _Host(cfg, i, name, dc, geo)


def spec_example_view(cfg) -> View:
    """
    The example of the specification's /hosts section, recorded
    through a registry so the null rules are the registry's.
    """
    h1 = _state(cfg, 0, "host-1", "frankfurt", "europe")
    h1.succeeded(master=True, lsn=0x3000060, timeline=1, lag_ms=None, lag_bytes=None,
                 position=None)
    h2 = _state(cfg, 1, "host-2", "amsterdam", "europe")
    h2.succeeded(master=False, lsn=0x2FFFE98, timeline=1, lag_ms=6193, lag_bytes=456,
                 position=None)
    h3 = _state(cfg, 2, "host-3")
    h3.succeeded(master=False, lsn=0x2000000, timeline=1, lag_ms=1, lag_bytes=1,
                 position=None)
    for _ in range(3):
        h3.failed()
    return view(*(s.status(cfg) for s in (h1, h2, h3)))


SPEC_EXAMPLE = [
    {"host": "host-1", "dc": "frankfurt", "geo": "europe", "master": True, "alive": True,
     "possible_dead": False, "lag_ms": 0, "sync_by_time": True, "lag_bytes": 0,
     "sync_by_bytes": True, "lsn": "0/3000060"},
    {"host": "host-2", "dc": "amsterdam", "geo": "europe", "master": False, "alive": True,
     "possible_dead": False, "lag_ms": 6193, "sync_by_time": False, "lag_bytes": 456,
     "sync_by_bytes": True, "lsn": "0/2FFFE98"},
    {"host": "host-3", "dc": None, "geo": None, "master": False, "alive": False,
     "possible_dead": True, "lag_ms": None, "sync_by_time": False, "lag_bytes": None,
     "sync_by_bytes": False, "lsn": None},
]


def test_hosts_matches_spec_example():
    """
    /hosts renders the specification's example exactly, fields in order.
    """
    cfg = load_config({P + "hosts": "host-1,host-2,host-3"})
    f = Fixture(spec_example_view(cfg), cfg)
    r = f.renderer.hosts()
    assert (r.status, r.content_type) == (200, JSON)
    got = json.loads(r.body)
    assert got == SPEC_EXAMPLE
    for entry in got:
        assert list(entry) == HOST_FIELDS


@pytest.mark.parametrize("name", ["host-1", "host-2", "host-3"])
def test_status_is_hosts_entry_without_name(name):
    """
    /status?host= is the host's /hosts entry without "host", same order.
    """
    cfg = load_config({P + "hosts": "host-1,host-2,host-3"})
    f = Fixture(spec_example_view(cfg), cfg)
    r = f.renderer.status(name)
    assert (r.status, r.content_type) == (200, JSON)
    got = json.loads(r.body)
    expected = next(e for e in SPEC_EXAMPLE if e["host"] == name)
    assert list(got.items()) == [(k, v) for k, v in expected.items() if k != "host"]


def test_status_without_host_is_400():
    """
    /status without host: 400 with the exact error text.
    """
    f = Fixture(view(master(0, "m")))
    assert f.renderer.status(None) == Response(
        400, JSON, b'{"error_text": "Get parameter \'host\' wasn\'t passed"}'
    )


@pytest.mark.parametrize("name", ["unknown", "", "M", "m ", "host-1"])
def test_status_unknown_host_is_404(name):
    """
    A host that is not monitored: 404 with an empty body.
    """
    f = Fixture(view(master(0, "m")))
    assert f.renderer.status(name) == Response(404, None, b"")


def test_hosts_possibly_dead_keeps_values():
    """
    A possibly dead host keeps its last values and sync flags in /hosts.
    """
    cfg = config("m,a")
    a = _state(cfg, 1, "a")
    a.succeeded(master=False, lsn=(1 << 32) | 0x3000060, timeline=1, lag_ms=50, lag_bytes=5000,
                position=None)
    a.failed()
    m = _state(cfg, 0, "m")
    m.succeeded(master=True, lsn=LSN, timeline=1, lag_ms=None, lag_bytes=None, position=None)
    f = Fixture(view(m.status(cfg), a.status(cfg)), cfg)
    got = json.loads(f.renderer.hosts().body)[1]
    assert got == {"host": "a", "dc": None, "geo": None, "master": False, "alive": True,
                   "possible_dead": True, "lag_ms": 50, "sync_by_time": True,
                   "lag_bytes": 5000, "sync_by_bytes": False, "lsn": "1/3000060"}


def test_hosts_unmeasurable_lag_is_null_with_false_flag():
    """
    A lag that cannot be measured is null with a false sync flag; the rest
    of the host stays.
    """
    hosts = (master(0, "m"), replica(1, "a", lag_ms=None, lag_bytes=7))
    got = json.loads(Fixture(view(*hosts), config("m,a")).renderer.hosts().body)[1]
    assert (got["lag_ms"], got["sync_by_time"]) == (None, False)
    assert (got["lag_bytes"], got["sync_by_bytes"]) == (7, True)
    assert got["lsn"] == "0/3000060"


def test_hosts_dead_master_has_nulls():
    """
    A master that died is shown with nulls, false flags and master false.
    """
    cfg = config("m,a")
    m = _state(cfg, 0, "m")
    m.succeeded(master=True, lsn=LSN, timeline=1, lag_ms=None, lag_bytes=None, position=None)
    for _ in range(3):
        m.failed()
    got = json.loads(Fixture(view(m.status(cfg)), cfg).renderer.hosts().body)[0]
    assert got == {"host": "m", "dc": None, "geo": None, "master": False, "alive": False,
                   "possible_dead": True, "lag_ms": None, "sync_by_time": False,
                   "lag_bytes": None, "sync_by_bytes": False, "lsn": None}


def test_hosts_body_changes_with_view():
    """
    /hosts reflects the current view, not a stale memo of an older one.
    """
    f = Fixture(view(master(0, "m"), replica(1, "a", lag_ms=1)), config("m,a"))
    first = json.loads(f.renderer.hosts().body)
    f.view = view(master(0, "m"), replica(1, "a", lag_ms=2))
    second = json.loads(f.renderer.hosts().body)
    assert (first[1]["lag_ms"], second[1]["lag_ms"]) == (1, 2)


# ---------------------------------------------------------------------------
# Accept


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("text/plain", False),
        ("text/html", False),
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("application/json;q=0.9", True),
        ("text/html, application/json;q=0.9", True),
        ("text/html,application/json", True),
        ("  application/json  ", True),
        ("application/*", False),
        ("application/jsonx", False),
        ("application/problem+json", False),
        ("text/json", False),
    ],
)
def test_wants_json(accept, expected):
    """
    JSON only when the Accept header lists application/json, alone or
    among other types, with or without parameters; */* is text.
    """
    assert wants_json(accept) is expected


@pytest.mark.parametrize(
    "accept", ["APPLICATION/JSON; charset=utf-8", "Application/Json", "text/html, APPLICATION/JSON"]
)
def test_wants_json_case_insensitive(accept):
    """
    Media type names are case-insensitive.
    """
    assert wants_json(accept) is True


# ---------------------------------------------------------------------------
# LSN formatting


@pytest.mark.parametrize(
    ("lsn", "text"),
    [
        (0, "0/0"),
        (0x3000060, "0/3000060"),
        (0x2FFFE98, "0/2FFFE98"),
        (1 << 32, "1/0"),
        ((0x16 << 32) | 0xB374D848, "16/B374D848"),
        (2**64 - 1, "FFFFFFFF/FFFFFFFF"),
    ],
)
def test_format_lsn(lsn, text):
    """
    LSNs are written as PostgreSQL does: upper-case hex halves, no padding.
    """
    assert format_lsn(lsn) == text


@given(st.integers(0, 2**64 - 1))
def test_lsn_round_trip(lsn):
    """
    format_lsn and parse_lsn are inverse, in either case.
    """
    text = format_lsn(lsn)
    assert parse_lsn(text) == lsn
    assert parse_lsn(text.lower()) == lsn
    assert text == text.upper()


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_parse_lsn_with_zero_padding(hi, lo):
    """
    Zero-padded halves (as pg_walfile-style tools print) parse too.
    """
    assert parse_lsn(f"{hi:08X}/{lo:08x}") == (hi << 32) | lo


def test_http_date_matches_email_utils() -> None:
    """The Date header's value, as email.utils formats it, for many instants."""
    import random
    from email.utils import formatdate

    from pgstatus.http.replay import http_date

    rng = random.Random(7)
    for second in [0, 784111777, 951782400, 4102444799,
                   *(rng.randrange(0, 2**32) for _ in range(2000))]:
        assert http_date(second) == formatdate(second, usegmt=True).encode(), second
