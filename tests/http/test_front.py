"""
The shortcut answers exactly as twisted.web and Klein do: for every input,
the bytes sent with the shortcut on equal those sent by twisted.web alone
(the shortcut off) over the same API and view, ``Date`` aside, and so does
the connection's fate (closed or kept) and what ``/metrics`` counts.  The
inputs: every route with its parameters, ``Accept`` variants, methods and
versions; a corpus of hostile heads; pipelines cut at every byte; and
heads made by hypothesis from a loose HTTP grammar.  In memory
(``StringTransport``, ``Clock``): the transport-level guarantees are tested
on real sockets in test_direct_send.py.
"""

from __future__ import annotations

from unittest import mock

import pytest
from http_apis import make_api, make_site
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web import http

from pgstatus.config.environ import load_config
from pgstatus.http.freshness import FreshReads
from pgstatus.http.head import MAX_HEAD, parse_head, plausible
from pgstatus.http.routes import FROM_VIEW, ROUTES
from pgstatus.model.selection import select_master
from pgstatus.model.status import HostStatus, View

CONFIG = load_config({
    "pg_status__hosts": "pg-1,pg-2,pg-3,pg-4",
    "pg_status__hosts_dc": "a,b,a,c",
    "pg_status__current_dc": "a",
})


def view(ready: bool = True) -> View:
    hosts = (
        HostStatus(0, "pg-1", "a", None, checked=True, reached=True, alive=True, master=True,
                   lag_ms=0, lag_bytes=0, lsn=0x3000060, timeline=2, sync_by_time=True,
                   sync_by_bytes=True),
        HostStatus(1, "pg-2", "b", None, checked=True, reached=True, alive=True, lag_ms=10,
                   lag_bytes=500, lsn=0x3000000, timeline=2, sync_by_time=True,
                   sync_by_bytes=True),
        HostStatus(2, "pg-3", "a", None, checked=True, reached=True, alive=True,
                   possible_dead=True, lag_ms=5000, lag_bytes=10, lsn=0x3000050, timeline=2,
                   sync_by_bytes=True),
        HostStatus(3, "pg-4", "c", None, checked=True, possible_dead=True),
    )
    return View(hosts, select_master(hosts), ready, 1)


PATHS = [
    "/master", "/replica", "/replica?lag_ms=100", "/replica?lag_bytes=100",
    "/replica?lag_ms=1&lag_bytes=1", "/replica?min_lsn=0/3000000", "/replica?min_lsn=0/3000060",
    "/replica?min_lsn=0/3000000&timeline=2", "/replica?timeline=3", "/replica?timeline=0",
    "/replica?lag_ms=-1", "/replica?lag_ms=", "/replica?lag_ms=1&lag_ms=x",
    "/replica?min_lsn=zz", "/replica?min_lsn=0%2F3000000", "/replica?lag_ms=1+1",
    "/sync_by_time", "/sync_by_time?lag_ms=20000", "/sync_by_time?lag_bytes=x",
    "/sync_by_bytes", "/sync_by_bytes?lag_bytes=0", "/sync_by_time_or_bytes",
    "/sync_by_time_and_bytes?lag_ms=1", "/most_sync_by_bytes",
    "/most_sync_by_bytes?lag_bytes=100&min_lsn=0/1", "/hosts", "/status", "/status?host=pg-2",
    "/status?host=nope", "/status?host=", "/version", "/live", "/ready", "/nope", "/",
    "/master/", "/mas%74er", "/hosts?x=1", "/replica?lag_ms=%ff%fe", "/status?host=%ff",
    "/replica?&&==&", "/replica?lag_ms", "/status?host=pg-2&host=pg-1",
    "/sync_by_time?lag_ms=" + "9" * 30, "/replica?lag_ms=" + "0" * 4400 + "1",
    "/replica?lag_ms=" + "1" * 4400, "/status?host=pg%2D2", "/replica?key=abc",
    "/replica?key=", "/sync_by_time?key=s1&lag_ms=100000", "/most_sync_by_bytes?key=z",
    "/replica?lag_ms=1;lag_bytes=1", "/replica?lag_ms=1%3Blag_bytes=1", "/replica?a=%zz",
    "/favicon.ico", "/a/b", "/nope?x=1", "/~x-y_z.1", "/MASTER", "/.well-known/x", "//master",
    "/master/.", "/a//b", "/metrics", "/openapi.json", "/follow", "/follow/check",
    "/follow/check?index=0", "/master#frag", "/master?#", "/replica??lag_ms=1",
]
ACCEPTS = [None, "application/json", "text/plain", "application/json; q=0.5, text/plain",
           "APPLICATION/JSON", "*/*"]

#: heads the shortcut must leave to twisted.web, and some it may take
CORPUS = [
    # a bare LF or CR hiding a Content-Length (the request smuggling)
    b"GET /live HTTP/1.1\r\nHost: x\nContent-Length: 24\r\n\r\nGET /hosts HTTP/1.1\r\n\r\n",
    b"GET /live HTTP/1.1\r\nHost: x\rContent-Length: 24\r\n\r\nGET /hosts HTTP/1.1\r\n\r\n",
    b"GET /live HTTP/1.1\nHost: x\n\n",
    b"GET /live HTTP/1.1\r\nHost: x\r\n\n",
    # header names that are not tokens
    b"GET /master HTTP/1.1\r\nX@Y: 1\r\n\r\n",
    b"GET /master HTTP/1.1\r\nX\tY: 1\r\n\r\n",
    b"GET /master HTTP/1.1\r\nX Y: 1\r\n\r\n",
    b"GET /master HTTP/1.1\r\n: 1\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost : x\r\n\r\n",
    # control characters in the target
    b"GET /mas\tter HTTP/1.1\r\n\r\n",
    b"GET /master\t HTTP/1.1\r\n\r\n",
    b"GET /mas\x00ter HTTP/1.1\r\n\r\n",
    b"GET /mas\x80ter HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /replica?lag_ms=1\x7f HTTP/1.1\r\n\r\n",
    # hosts Klein cannot read
    b"GET /master HTTP/1.1\r\nHost: \xff\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: a..b\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: [1..2]\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: [" + b"a" * 64 + b"]\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: [.]:80\r\n\r\n",
    # unterminated or not HTTP/1.x
    b"GET /master\r\n",
    b"GET /master\r\n\r\n",
    b"garbage\n\n",
    b"\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET /master HTTP/1.2\r\n\r\n",
    b"GET /master HTTP/2.0\r\n\r\n",
    b"GET /master HTTP/1.1 \r\n\r\n",
    b"GET  /master HTTP/1.1\r\n\r\n",
    b"get /master HTTP/1.1\r\n\r\n",
    b"GET http://x/master HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET * HTTP/1.1\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\n\r\n",
    b"POST /master HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    b"DELETE /master HTTP/1.1\r\n\r\n",
    # bodies and protocol changes
    b"GET /master HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    b"GET /master HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    b"GET /master HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET /master HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET /master HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
    b"GET /master HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    # obs-fold, NUL, odd whitespace
    b"GET /master HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
    b"GET /master HTTP/1.1\r\n X: a\r\n\r\n",
    b"GET /master HTTP/1.1\r\nX: a\x00b\r\n\r\n",
    b"GET /master HTTP/1.1\r\nX:\ta\t\r\n\r\n",
    b"GET /master HTTP/1.1\r\nX: \xc3\xa9\r\n\r\n",
    b"GET /master HTTP/1.1\r\nX:\r\n\r\n",
    # connection handling
    b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\nGET /live HTTP/1.1\r\n\r\n",
    b"GET /master HTTP/1.1\r\nConnection: CLOSE\r\n\r\n",
    b"GET /master HTTP/1.1\r\nConnection: keep-alive\r\n\r\nGET /live HTTP/1.1\r\n\r\n",
    b"GET /master HTTP/1.1\r\nConnection: close, x\r\n\r\n",
    b"GET /master HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
    b"GET /master HTTP/1.0\r\n\r\nGET /live HTTP/1.0\r\n\r\n",
    b"GET /master HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /live HTTP/1.0\r\n\r\n",
    b"HEAD /hosts HTTP/1.1\r\n\r\nHEAD /master HTTP/1.0\r\n\r\n",
    # headers read twice
    b"GET /master HTTP/1.1\r\nAccept: application/json\r\nAccept: text/plain\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    b"GET /master HTTP/1.1\r\naccept: application/json\r\n\r\n",
    # long heads
    b"GET /master HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n",
    b"GET /master HTTP/1.1\r\n" + b"X: y\r\n" * 70 + b"\r\n",
    # inherited from twisted.web and kept (docs/guide/listening.md)
    b"GET /master HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
    b"GET /live HTTP/1.1\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\nGET /hosts HTTP/1.1\r\n\r\n",
    b"GET http://x/metrics HTTP/1.1\r\n\r\n",
]

#: pipelines whose every cut (two chunks at each byte) must answer the same
PIPELINES = [
    b"GET /master HTTP/1.1\r\nHost: x\r\n\r\nGET /replica HTTP/1.1\r\n\r\n"
    b"GET /hosts HTTP/1.1\r\nAccept: application/json\r\n\r\n",
    b"GET /replica HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\nGET /replica HTTP/1.1\r\n\r\n",
    b"GET /live HTTP/1.1\r\n\r\nGET /live HTTP/1.1\r\nHost: x\nContent-Length: 24\r\n\r\n"
    b"GET /hosts HTTP/1.1\r\n\r\n",
    b"HEAD /status?host=pg-2 HTTP/1.1\r\n\r\nGET /master HTTP/1.1\r\nConnection: close\r\n\r\n"
    b"GET /live HTTP/1.1\r\n\r\n",
    # fresh reads that wait (0.5 s: the clock moves), with requests behind
    b"GET /replica?min_lsn=0/9000000&wait_ms=500 HTTP/1.1\r\n\r\nGET /master HTTP/1.1\r\n\r\n"
    b"GET /metrics HTTP/1.1\r\n\r\n",
    b"GET /replica?min_lsn=0/9000000&wait_ms=500 HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    b"GET /replica?min_lsn=0/9000000&wait_ms=300 HTTP/1.1\r\nConnection: close\r\n\r\n",
]


def _dated_by(clock: Clock):
    def dated(msSinceEpoch=None):
        return http.datetimeToString(clock.seconds() if msSinceEpoch is None else msSinceEpoch)

    return dated


class Pair:
    """
    Two servers of the same API and view, in memory: the front before the
    Klein site, and the Klein site served by plain twisted.web with no front
    at all.  Each runs on a clock of its own that moves the same way (between
    chunks, and afterwards until every wait has ended); twisted.web dates its
    answers with ``time.time``, which reads the running server's clock while
    it runs (patched to read the running server's clock), so ``Date`` is
    compared like every other byte.
    """

    def __init__(self, ready: bool = True, step: float = 0.35, **limits) -> None:
        self.step = step
        self.clocks = [Clock(), Clock()]
        for c in self.clocks:
            c.advance(1_800_000_000.3)
        v = view(ready)
        self.apis = [make_api(lambda: v, CONFIG, "9.9.9", fresh=FreshReads(c, lambda i: None))
                     for c in self.clocks]
        self.on = make_site(self.apis[0], self.clocks[0], **limits)
        self.off = make_site(self.apis[1], self.clocks[1], enabled=False)

    def run(self, chunks: list[bytes]) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
        out = []
        # all chunks within 5 s: well inside the front's head deadline, which
        # plain twisted.web does not have
        step = min(self.step, 5 / len(chunks))
        for site, clock in ((self.on, self.clocks[0]), (self.off, self.clocks[1])):
            with mock.patch("twisted.web.server.datetimeToString", _dated_by(clock)):
                t = StringTransport()
                p = site.buildProtocol(None)
                p.makeConnection(t)
                for c in chunks:
                    if t.disconnecting:
                        break
                    p.dataReceived(c)
                    clock.advance(step)
                for _ in range(30):
                    clock.advance(0.1)
                out.append((t.value(), bool(t.disconnecting)))
                p.connectionLost(Failure(ConnectionDone()))
        return out[0], out[1]

    def check(self, chunks: list[bytes]) -> tuple[bytes, bool]:
        on, off = self.run(chunks)
        assert on == off, (b"".join(chunks)[:300], on[0][:600], off[0][:600])
        assert self.apis[0].renderer.requests == self.apis[1].renderer.requests
        assert self.apis[0].renderer.fallbacks == self.apis[1].renderer.fallbacks
        return on


def request(path: str, method: str = "GET", version: str = "1.1",
            accept: str | None = None, close: bool = False) -> bytes:
    head = f"{method} {path} HTTP/{version}\r\nHost: pg-status\r\n"
    if accept is not None:
        head += f"Accept: {accept}\r\n"
    if close:
        head += "Connection: close\r\n"
    return head.encode("latin-1") + b"\r\n"


@pytest.mark.parametrize("ready", [True, False])
def test_every_route_and_variant_as_twisted_web(ready):
    """
    Each path, with each Accept, method and version, alone and twice on
    one connection (the round-robin turns the same on both).
    """
    pair = Pair(ready)
    for path in PATHS:
        for accept in ACCEPTS:
            for method in ("GET", "HEAD", "POST"):
                for version in ("1.1", "1.0"):
                    one = request(path, method, version, accept)
                    pair.check([one])
                    pair.check([one + one])
            pair.check([request(path, accept=accept, close=True) + request(path)])


def test_the_shortcut_answers_the_routes_it_may():
    """
    Not vacuous: for the plain requests of the answered routes, the
    shortcut answers itself (twisted.web is never reached), and for the
    others it hands over.
    """
    pair = Pair()
    for path, routed in [("/master", True), ("/replica?lag_ms=1", True), ("/hosts", True),
                         ("/metrics", False), ("/nope", False), ("/mas%74er", False)]:
        t = StringTransport()
        p = pair.on.buildProtocol(None)
        p.makeConnection(t)
        p.dataReceived(request(path))
        assert (p.channel is None) == routed, path
        assert t.value().startswith(b"HTTP/1.1 ")
        p.connectionLost(None)


@pytest.mark.parametrize("data", CORPUS, ids=range(len(CORPUS)))
def test_hostile_heads_as_twisted_web(data):
    """
    Hostile or unusual heads: the same answers (one 400 where twisted.web
    gives one, never a second answer smuggled behind), whole and byte by
    byte.
    """
    pair = Pair()
    pair.check([data])
    pair.check([data[i:i + 1] for i in range(len(data))])


@pytest.mark.parametrize("data", PIPELINES, ids=range(len(PIPELINES)))
def test_pipelines_cut_at_every_byte(data):
    pair = Pair()
    for i in range(len(data) + 1):
        pair.check([data[:i], data[i:]])


def test_route_table_is_the_klein_apps():
    """
    The Klein application's routes are exactly the route table's, and the
    shortcut's paths are the table's answered ones.
    """
    api = make_api(lambda: view(), CONFIG, "1")
    rules = {r.rule for r in api.app.url_map.iter_rules()}
    assert rules == {r.path for r in ROUTES}
    assert set(FROM_VIEW) == {r.path.encode() for r in ROUTES if r.from_view}


def test_no_traceback_or_critical_line_for_hostile_bytes():
    """
    Client bytes never produce critical lines or tracebacks.
    """
    from twisted.logger import LogLevel, globalLogPublisher

    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        pair = Pair()
        for data in CORPUS:
            pair.check([data])
    finally:
        globalLogPublisher.removeObserver(events.append)
    bad = [e for e in events if e.get("log_level") in (LogLevel.critical, LogLevel.error)
           or "log_failure" in e]
    assert bad == []


def test_head_grammar():
    assert parse_head(request("/master")) is not None
    assert parse_head(request("/master", "HEAD", "1.0")).close == b"HTTP/1.0"
    assert parse_head(b"GET /master HTTP/1.1\r\nX: a\r\n\r\n") is not None
    for bad in CORPUS:
        end = bad.find(b"\r\n\r\n")
        head = bad[:end + 4] if end >= 0 else bad
        if head.startswith((b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n",
                            b"GET /master HTTP/1.1\r\nConnection: CLOSE",
                            b"GET /master HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
                            b"GET /master HTTP/1.0\r\n\r\n", b"HEAD /hosts HTTP/1.1\r\n\r\n",
                            b"GET /master HTTP/1.1\r\naccept: application/json\r\n\r\n",
                            b"GET /master HTTP/1.1\r\nX:\ta\t\r\n\r\n",
                            b"GET /master HTTP/1.1\r\nX:\r\n\r\n")):
            continue
        assert parse_head(head) is None, bad
    assert plausible(b"GET /mas")
    assert not plausible(b"GET /master\r\n")
    assert not plausible(b"GET /master HTTP/1.1\nHost")


# -- heads made up by hypothesis ------------------------------------------------

_TCHARS = "!#$%&'*+-.^_`|~abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_methods = st.sampled_from([b"GET", b"HEAD", b"POST", b"get", b"GE T", b""])
_paths = st.one_of(st.sampled_from([r.path.encode() for r in ROUTES] + [b"/", b"/x", b"*"]),
                   st.binary(max_size=12).map(lambda b: b"/" + b))
_queries = st.one_of(st.just(b""), st.binary(max_size=24).map(lambda b: b"?" + b),
                     st.sampled_from([b"?lag_ms=1", b"?key=a&lag_bytes=2", b"?host=pg-2",
                                      b"?min_lsn=0/3000000&timeline=2", b"?lag_ms=1;x=2"]))
_versions = st.sampled_from([b" HTTP/1.1", b" HTTP/1.0", b"", b" HTTP/2.0", b" http/1.1"])
_eols = st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"])
_names = st.one_of(st.sampled_from([b"Host", b"Accept", b"Connection", b"Content-Length",
                                    b"Transfer-Encoding", b"X-A", b"accept"]),
                   st.text(alphabet=_TCHARS, min_size=1, max_size=8).map(str.encode),
                   st.binary(min_size=1, max_size=6))
_values = st.one_of(st.sampled_from([b"x", b"application/json", b"close", b"keep-alive",
                                     b"0", b"5", b"chunked", b""]),
                    st.binary(max_size=12))
_fields = st.lists(st.tuples(_names, st.sampled_from([b": ", b":", b" : ", b":\t"]), _values,
                             _eols), max_size=5)
_heads = st.builds(
    lambda m, p, q, v, e1, fields, e2, body: (
        m + b" " + p + q + v + e1
        + b"".join(n + sep + val + e for n, sep, val, e in fields) + e2 + body),
    _methods, _paths, _queries, _versions, _eols, _fields, _eols,
    st.sampled_from([b"", b"GET /live HTTP/1.1\r\n\r\n", b"abc", b"0\r\n\r\n"]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_heads, min_size=1, max_size=3), st.integers(min_value=0, max_value=400))
def test_made_up_heads_as_twisted_web(heads, cut):
    data = b"".join(heads)
    cut = min(cut, len(data))
    Pair().check([data[:cut], data[cut:]])


@pytest.mark.parametrize("host", [b"[::1]", b"[::1]:8080", b"[::ffff:127.0.0.1]",
                                  b"[fe80::1]:80", b"127.0.0.1:8080", b"pg-status.local"])
def test_address_hosts_are_cached_and_answered_as_twisted_web(host):
    """
    The hosts clients use (names, IPv4 and IPv6 literals, ports) stay on the
    cache's path, and its answers are twisted.web's.
    """
    data = b"GET /master HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"
    assert parse_head(data) is not None
    Pair().check([data])
