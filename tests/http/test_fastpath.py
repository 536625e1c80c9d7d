"""
The fast path answers exactly as Klein does: for every route, parameter
combination, Accept variant and method, the raw response bytes of a
fast-path site equal those of the same site with the shortcut off (``Date``
aside, which both take from the clock).  Real sockets on 127.0.0.1.
"""

from __future__ import annotations

import re
import socket

import pytest
import pytest_twisted
from http_apis import make_api
from twisted.internet import threads

from pgstatus.config.environ import load_config
from pgstatus.http.fastpath import FastSite
from pgstatus.http.transport import listen_tcp
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
    "/replica?&&==&", "/replica?lag_ms", "/status?host=pg-2&host=pg-1", "/replica?lag_ms=9" * 1,
    "/sync_by_time?lag_ms=" + "9" * 30, "/status?host=pg%2D2", "/replica?key=abc",
    "/replica?key=", "/sync_by_time?key=s1&lag_ms=100000", "/most_sync_by_bytes?key=z",
    # no such route (the fast path answers 404 for plain paths) or a route
    # only Klein serves, or a path it must leave to Klein's router
    "/favicon.ico", "/a/b", "/nope?x=1", "/~x-y_z.1", "/MASTER", "/.well-known/x", "//master",
    "/master/.", "/a//b", "/metrics", "/openapi.json", "/follow", "/follow/check",
    "/follow/check?index=0",
]


def raw_request(port: int, data: bytes) -> bytes:
    """
    Send ``data`` and read until the server closes (every request below
    ends with ``Connection: close``).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return re.sub(rb"Date: [^\r]*\r\n", b"Date: X\r\n", b"".join(chunks))


@pytest.fixture
def sites(reactor):
    ports = []

    def make(fast: bool, ready: bool = True):
        v = view(ready)
        api = make_api(lambda: v, CONFIG, "9.9.9")
        site = FastSite(api.resource(), api.renderer, reactor, fast=fast)
        port = listen_tcp(reactor, 0, site, interface="127.0.0.1")
        ports.append(port)
        return port.getHost().port

    yield make
    for p in ports:
        pytest_twisted.blockon(p.stopListening())


def requests_for(path: str) -> list[bytes]:
    """
    GET and HEAD with three Accept variants over HTTP/1.1 (closing), and
    HTTP/1.0 as HAProxy's ``option httpchk`` sends it (no Host), with JSON
    asked for, and asking to keep the connection (which twisted.web closes).
    """
    out = []
    for method in (b"GET", b"HEAD"):
        for accept in (None, b"application/json", b"text/html, application/json;q=0.5"):
            head = b"%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path.encode())
            if accept:
                head += b"Accept: " + accept + b"\r\n"
            out.append(head + b"Connection: close\r\n\r\n")
        old = b"%s %s HTTP/1.0\r\n" % (method, path.encode())
        out += [old + b"\r\n", old + b"Accept: application/json\r\n\r\n",
                old + b"Connection: keep-alive\r\n\r\n"]
    return out


@pytest.mark.parametrize("ready", [True, False])
@pytest_twisted.inlineCallbacks
def test_fast_path_bytes_equal_klein(sites, ready):
    fast, slow = sites(True, ready), sites(False, ready)
    for path in PATHS:
        for req in requests_for(path):
            a = yield threads.deferToThread(raw_request, fast, req)
            b = yield threads.deferToThread(raw_request, slow, req)
            assert a == b, (req, a, b)
            assert a.startswith(req.split(b"\r\n", 1)[0].rsplit(b" ", 1)[1] + b" ")


@pytest_twisted.inlineCallbacks
def test_no_such_route_and_http_1_0_leave_klein_unloaded(reactor):
    """
    A plain path with no route (a browser's ``/favicon.ico``, a typo) and
    HTTP/1.0 requests (HAProxy's default check) are answered without
    building Klein's resource: the first such request would otherwise
    import Klein and twisted.web's server (about 100 ms of CPU in one go
    here).  Paths Klein's router could read as another route, and Klein's
    own routes, still go to it.
    """
    built = []

    def resource():
        built.append(True)
        return make_api(lambda: view(), CONFIG, "9.9.9").resource()

    api = make_api(lambda: view(), CONFIG, "9.9.9")
    site = FastSite(resource, api.renderer, reactor)
    port = listen_tcp(reactor, 0, site, interface="127.0.0.1")
    try:
        number = port.getHost().port
        for req in (b"GET /favicon.ico HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"GET /master HTTP/1.0\r\n\r\n",
                    b"GET /replica?lag_ms=100 HTTP/1.0\r\n\r\n",
                    b"GET /nope HTTP/1.0\r\n\r\n"):
            answer = yield threads.deferToThread(raw_request, number, req)
            version = req.split(b"\r\n", 1)[0].rsplit(b" ", 1)[1]
            assert answer.split(b" ", 2)[:2] in ([version, b"200"], [version, b"404"]), answer
            assert (b"Connection: close" in answer) == (version == b"HTTP/1.1"), answer
        assert built == []
        assert api.renderer.requests[("other", 404)] == 3
        answer = yield threads.deferToThread(
            raw_request, number, b"GET /mas%74er HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 ") and built == [True]
    finally:
        yield port.stopListening()


def test_klein_routes_are_the_fast_paths_and_klein_paths():
    """
    Every route of the Klein application is a path the fast path answers or
    one of :data:`~pgstatus.http.wire.KLEIN_PATHS`; the fast path answers 404
    for any other plain path, so a route added to Klein only must be added
    there.
    """
    from pgstatus.http.params import REPLICA_ROUTES
    from pgstatus.http.webapp import app
    from pgstatus.http.wire import KLEIN_PATHS, LABELS

    paths = set()
    for rule in app.url_map.iter_rules():
        if "<" in rule.rule:
            assert rule.rule.endswith(":route>"), rule.rule
            paths |= {f"/{r}" for r in REPLICA_ROUTES}
        else:
            paths.add(rule.rule)
    assert paths == {p.decode() for p in (*LABELS, *KLEIN_PATHS)}
    assert not set(LABELS) & KLEIN_PATHS


@pytest_twisted.inlineCallbacks
def test_keep_alive_pipelined_and_mixed(sites):
    """
    Several requests on one connection, pipelined in one write, with a
    request the fast path does not take in the middle: every answer arrives,
    in order.
    """
    fast, slow = sites(True), sites(False)
    reqs = (b"GET /master HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /hosts HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /master HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
            b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    a = yield threads.deferToThread(raw_request, fast, reqs)
    b = yield threads.deferToThread(raw_request, slow, reqs)
    assert a == b
    assert a.count(b"HTTP/1.1 ") == 4
    assert b"405 Method Not Allowed" in a and a.endswith(b"9.9.9")


@pytest_twisted.inlineCallbacks
def test_request_split_across_packets(sites):
    fast = sites(True)

    def split_send() -> bytes:
        with socket.create_connection(("127.0.0.1", fast), timeout=5) as s:
            for piece in (b"GET /mas", b"ter HTTP/1.1\r\nHo", b"st: x\r\nConnection: close\r\n",
                          b"\r\n"):
                s.sendall(piece)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return data

    data = yield threads.deferToThread(split_send)
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"\r\n\r\npg-1")


def test_wire_memo_is_bounded_by_bytes():
    """
    Per-check responses (/hosts, /status) must not pile up in the memo of
    response bytes: it holds at most its byte budget.
    """
    from pgstatus.http.answer import Response
    from pgstatus.http.wire import Wire

    wire = Wire(max_bytes=100_000)
    for i in range(10_000):
        body = b"x" * 1000 + str(i).encode()
        head, tail = wire.parts(Response(200, b"application/json", body), False, False)
        assert tail.endswith(body)
        assert wire._held <= 100_000
    assert len(wire._memo) <= 100_000 // 2000 + 1


def test_constants_agree_with_twisted_web():
    """
    What the fast path writes without importing twisted.web.server is what
    twisted.web writes: the reason phrase of every status the API answers,
    the ``Server`` header and the longest accepted request head.
    """
    from twisted.web.http import HTTPChannel, responses
    from twisted.web.server import version

    from pgstatus.http import channel, wire

    for status in (200, 400, 404, 405, 500, 503):
        assert wire.reason(status) == responses[status]
    assert wire.SERVER_VERSION == version
    assert channel.MAX_TOTAL == HTTPChannel.totalHeadersSize
    assert channel.MAX_HEADERS == HTTPChannel.maxHeaders


def one_by_one(port: int, requests: list[bytes]) -> list[bytes]:
    """
    Send each request alone on one keep-alive connection, reading its
    answer (up to the known body) before sending the next.
    """
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        for req in requests:
            s.sendall(req)
            data = b""
            while not re.search(rb"\r\n\r\npg-\d$", data):
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
            answers.append(data)
    return answers


@pytest_twisted.inlineCallbacks
def test_memoised_answers_are_counted_per_request(reactor):
    """
    Answers from memoised request heads still count every request for
    ``/metrics``: requests by route and status, and replica requests answered
    with the master by reason; pipelined, and each request alone in a read
    (the shortest path).
    """
    v = view()
    api = make_api(lambda: v, CONFIG, "9.9.9")
    site = FastSite(api.resource(), api.renderer, reactor)
    port = listen_tcp(reactor, 0, site, interface="127.0.0.1")
    fallback = b"GET /replica?lag_ms=1 HTTP/1.1\r\nHost: x\r\n\r\n"
    rotate = b"GET /replica HTTP/1.1\r\nHost: x\r\n\r\n"
    master = b"GET /master HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        last = master.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
        got = yield threads.deferToThread(
            raw_request, port.getHost().port, fallback * 5 + rotate * 4 + last)
        alone = yield threads.deferToThread(
            one_by_one, port.getHost().port, [fallback] * 3 + [rotate] * 4 + [master] * 2)
    finally:
        yield port.stopListening()
    assert got.count(b"HTTP/1.1 200 OK") == 10
    assert all(a.startswith(b"HTTP/1.1 200 OK") for a in alone)
    counts = api.renderer.requests
    assert counts[("replica", 200)] == 9 + 7 and counts[("master", 200)] == 1 + 2
    assert sum(api.renderer.fallbacks.values()) == 5 + 3


@pytest_twisted.inlineCallbacks
def test_memoised_heads_follow_the_view(reactor):
    """
    The same request bytes, memoised with their answer, are answered anew
    when the monitor publishes another view: 503 before readiness, the
    master after, 404 once no master is left.
    """
    from dataclasses import replace

    current = {"view": view(ready=False)}
    api = make_api(lambda: current["view"], CONFIG, "9.9.9")
    site = FastSite(api.resource(), api.renderer, reactor)
    port = listen_tcp(reactor, 0, site, interface="127.0.0.1")
    try:
        n = port.getHost().port
        req = b"GET /master HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        a = yield threads.deferToThread(raw_request, n, req)
        assert a.startswith(b"HTTP/1.1 503 ") and a.endswith(b'"pg_monitor is not ready"}')
        current["view"] = view(ready=True)
        a = yield threads.deferToThread(raw_request, n, req)
        assert a.startswith(b"HTTP/1.1 200 ") and a.endswith(b"\r\n\r\npg-1")
        dead = tuple(replace(h, alive=False, master=False)
                     for h in current["view"].hosts)
        current["view"] = View(dead, None, True, 3)
        a = yield threads.deferToThread(raw_request, n, req)
        assert a.startswith(b"HTTP/1.1 404 ") and a.endswith(b"\r\n\r\n")
    finally:
        yield port.stopListening()


ODD_HEADS = [
    b"GET /status?host=pg-\xff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: x\r\nX Y: z\r\nConnection: close\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: x\r\n: z\r\nConnection: close\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: x\r\nX-Y: a\x00b\r\nConnection: close\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: x\r\n" + b"X-A: 1\r\n" * 501 + b"Connection: close\r\n\r\n",
    # the first Connection header counts: close after the first answer
    b"GET /master HTTP/1.1\r\nHost: x\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"
    b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
]


@pytest.mark.parametrize("req", ODD_HEADS, ids=range(len(ODD_HEADS)))
@pytest_twisted.inlineCallbacks
def test_odd_heads_answered_as_twisted_web(sites, req):
    """
    Heads twisted.web refuses or reads its own way (bytes outside ASCII,
    malformed header names, NUL, too many headers, two Connection headers)
    get twisted.web's answer from the fast-path site too.
    """
    fast, slow = sites(True), sites(False)
    a = yield threads.deferToThread(raw_request, fast, req)
    b = yield threads.deferToThread(raw_request, slow, req)
    assert a == b, (req[:80], a, b)


@pytest_twisted.inlineCallbacks
def test_pipelined_answers_that_need_no_wait(reactor, monkeypatch):
    """
    A thousand pipelined read-your-writes requests whose wait ends at once
    (here: the cap on waiting requests is reached) are all answered, in a
    loop rather than one stack frame deeper per request.
    """
    from pgstatus.http import freshness

    monkeypatch.setattr(freshness, "MAX_WAITERS", 0)
    v = view()
    fresh = freshness.FreshReads(reactor, lambda i: None)
    api = make_api(lambda: v, CONFIG, "9.9.9", fresh)
    site = FastSite(api.resource(), api.renderer, reactor)
    port = listen_tcp(reactor, 0, site, interface="127.0.0.1")
    try:
        one = b"GET /replica?min_lsn=0/3000061&wait_ms=50 HTTP/1.1\r\nHost: x\r\n\r\n"
        last = b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        a = yield threads.deferToThread(raw_request, port.getHost().port, one * 1000 + last)
        assert a.count(b"HTTP/1.1 200 ") == 1001
        assert a.endswith(b"9.9.9")
    finally:
        yield port.stopListening()
