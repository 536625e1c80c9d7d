"""
The front's seams with twisted.web, in memory (``StringTransport``,
``Clock``): requests reach twisted.web one at a time whatever a client
pipelines and however slowly it reads; the head deadline covers heads only
(never a keep-alive after a hand-over, a wait or a stream); client bytes that
twisted.web chokes on get a 400, an oversized head a 431, and no line above
WARNING.  Each test failed on the front this one replaced (shortcut.py and
connection.py), as its docstring says.
"""

from __future__ import annotations

from unittest import mock

import pytest
from http_apis import make_api, make_site
from test_front import CONFIG, _dated_by, view
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, globalLogPublisher
from twisted.python.failure import Failure

from pgstatus.http.answer import Response
from pgstatus.http.freshness import FreshReads

METRICS = Response(200, b"text/plain; version=0.0.4", b"m" * 50_000)
FULL_AT = 65_536


class SlowReader(StringTransport):
    """
    A transport whose buffer counts as full past :data:`FULL_AT` bytes, as
    a socket's does for a client that does not read: it pauses its
    producer, as Twisted's transports do.
    """

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def write(self, data: bytes) -> None:
        super().write(data)
        if not self.full and len(self.value()) > FULL_AT and self.producer is not None:
            self.full = True
            self.producer.pauseProducing()

    def drain(self) -> bytes:
        data = self.value()
        self.clear()
        if self.full:
            self.full = False
            if self.producer is not None:
                self.producer.resumeProducing()
        return data


def server(clock: Clock | None = None, enabled: bool = True, **limits):
    clock = clock or Clock()
    if not clock.seconds():
        clock.advance(1_800_000_000)
    v = view()
    api = make_api(lambda: v, CONFIG, "9.9.9", fresh=FreshReads(clock, lambda i: None),
                   metrics=lambda: METRICS)
    return make_site(api, clock, enabled, **limits), clock


def connect(site, transport=None):
    t = transport if transport is not None else StringTransport()
    p = site.buildProtocol(None)
    p.makeConnection(t)
    return p, t


def get(path: str, *extra: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\n" + "".join(e + "\r\n" for e in extra) + "\r\n").encode()


@pytest.mark.parametrize("first", ["/metrics", "/hosts"], ids=["after a hand-over", "cache"])
@pytest.mark.parametrize("then", ["/metrics", "/hosts", "/mas%74er"])
def test_a_client_that_does_not_read_holds_one_answer(first, then):
    """
    1,000 pipelined requests in one read from a client that reads nothing:
    once the transport's buffer is full, the front stops answering, so what
    the connection holds stays about one answer past the buffer; every
    answer comes, in order, as the client reads.  (Before: after a hand-over
    twisted.web answered every buffered request, ~50 MB here.)
    """
    site, clock = server()
    with mock.patch("twisted.web.server.datetimeToString", _dated_by(clock)):
        p, t = connect(site, SlowReader())
        p.dataReceived(get(first) + get(then) * 999)
        assert len(t.value()) < FULL_AT + 2 * len(METRICS.body) + 4096
        got = t.drain()
        for _ in range(5000):
            if not t.value():
                break
            got += t.drain()
    ref_site, ref_clock = server(enabled=False)
    with mock.patch("twisted.web.server.datetimeToString", _dated_by(ref_clock)):
        q, qt = connect(ref_site)
        q.dataReceived(get(first) + get(then) * 999)
    # (Klein decodes /mas%74er to /master)
    assert got.count(b"HTTP/1.1 200 OK") == 1000
    assert got == qt.value()


def test_requests_reach_twisted_web_one_at_a_time():
    """
    While twisted.web answers a request later (a fresh read that waits), the
    requests behind it stay with the front: twisted.web is handed the next
    only when that answer is complete.
    """
    site, clock = server()
    received = []
    real = site.web.getResourceFor

    def watching(request):
        received.append(request.uri)
        return real(request)

    site.web.getResourceFor = watching
    p, t = connect(site)
    # (Content-Length: 0 takes it past the cache, to twisted.web)
    wait = get("/replica?min_lsn=0/9000000&wait_ms=500", "Content-Length: 0")
    p.dataReceived(wait + get("/metrics") * 50)
    assert received == [b"/replica?min_lsn=0/9000000&wait_ms=500"]
    assert t.value() == b""
    clock.advance(0.6)
    assert len(received) == 51
    assert t.value().count(b"HTTP/1.1 200 OK") == 51


def test_keep_alive_after_a_hand_over_outlives_the_head_deadline():
    """
    After a request twisted.web answered, an idle keep-alive connection is
    twisted.web's to time out (its idle timeout), not cut at the head
    deadline.  (Before: aborted ``header_timeout`` after every request
    twisted.web answered, so followers' streams dropped every ~11 s.)
    """
    site, clock = server(header_timeout=1.0, idle_timeout=60.0)
    p, t = connect(site)
    p.dataReceived(get("/metrics"))
    assert t.value().startswith(b"HTTP/1.1 200 OK")
    t.clear()
    for _ in range(20):
        clock.advance(0.5)
    assert not t.disconnecting
    p.dataReceived(get("/master"))
    assert t.value().startswith(b"HTTP/1.1 200 OK")
    assert not t.disconnecting


def test_a_wait_longer_than_the_head_deadline_is_answered():
    """
    A request twisted.web answers after a wait longer than the head
    deadline is answered, then the connection stays.
    """
    site, clock = server(header_timeout=1.0, idle_timeout=60.0)
    p, t = connect(site)
    p.dataReceived(get("/replica?min_lsn=0/9000000&wait_ms=3000", "Content-Length: 0"))
    for _ in range(40):
        clock.advance(0.1)
    assert t.value().startswith(b"HTTP/1.1 200 OK")
    assert not t.disconnecting


def test_a_silent_connection_is_cut_at_the_head_deadline():
    """
    A connection that sends nothing (or is stuck in a TLS handshake or a
    PROXY header, which the front sees as no bytes) is cut at the head
    deadline, not at the idle timeout.  (Before: at the idle timeout.)
    """
    site, clock = server(header_timeout=1.0, idle_timeout=60.0)
    p, t = connect(site)
    for _ in range(10):
        clock.advance(0.5)
    assert t.disconnecting
    # and a connection answered once, then idle, waits for the idle timeout
    p, t = connect(site)
    p.dataReceived(get("/master"))
    for _ in range(10):
        clock.advance(0.5)
    assert not t.disconnecting


def test_a_dribbled_head_is_cut_at_the_head_deadline_after_a_hand_over():
    """
    After a hand-over, the next request's head still has its deadline.
    """
    site, clock = server(header_timeout=1.0, idle_timeout=60.0)
    p, t = connect(site)
    p.dataReceived(get("/metrics"))
    p.dataReceived(b"GET /master HTTP/1.1\r\nX: ")
    for _ in range(10):
        clock.advance(0.5)
    assert t.disconnecting


@pytest.fixture
def log_events():
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def test_a_content_length_of_thousands_of_digits_is_a_400(log_events):
    """
    twisted.web's ``int()`` of a 4,301-digit Content-Length raises: the
    client gets twisted.web's 400 and the connection closes, with one
    WARNING line and nothing above.  (Before: no answer and a critical
    line per request.)
    """
    site, clock = server()
    for _ in range(3):
        p, t = connect(site)
        p.dataReceived(b"GET /master HTTP/1.1\r\nContent-Length: " + b"1" * 4301 + b"\r\n\r\n")
        assert t.value() == b"HTTP/1.1 400 Bad Request\r\n\r\n"
        assert t.disconnecting
        p.connectionLost(Failure(ConnectionDone()))
    levels = [e["log_level"] for e in log_events if "log_level" in e]
    assert LogLevel.critical not in levels and LogLevel.error not in levels
    assert levels.count(LogLevel.warn) == 1


@pytest.mark.parametrize("head", [
    b"GET /master HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /master HTTP/1.1\r\n" + b"X-Many: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n" * 600 + b"\r\n",
    get("/metrics") + b"GET /master HTTP/1.1\r\nX-Big: " + b"a" * 20000,
], ids=["one long line", "many lines", "after a hand-over, unfinished"])
def test_an_oversized_head_is_a_431(head):
    """
    A head over 16 KiB gets a 431 with a JSON ``error_text`` and the
    connection closes, at once, whole or dribbled.  (twisted.web alone
    closes without an answer for a line over its limit; before, so did
    the front.)
    """
    for chunks in ([head], [head[i:i + 1000] for i in range(0, len(head), 1000)]):
        site, clock = server()
        p, t = connect(site)
        for c in chunks:
            p.dataReceived(c)
        assert t.value().endswith(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
            b'{"error_text": "request head too large"}')
        assert t.disconnecting


def test_requests_behind_a_wait_are_not_answered_all_at_once():
    """
    A client that does not read pipelines 200 ``/metrics`` behind a
    request twisted.web answers later (a fresh read that waits): when the
    wait ends, what the connection holds stays about one answer past the
    full buffer (had the front fed the channel while the wait was in hand,
    twisted.web would have answered every buffered request at once, 10 MB
    here), and every answer comes as the client reads.
    """
    site, clock = server()
    p, t = connect(site, SlowReader())
    wait = get("/replica?min_lsn=0/9000000&wait_ms=500", "Content-Length: 0")
    p.dataReceived(wait + get("/metrics") * 200)
    assert t.value() == b""
    clock.advance(0.6)
    assert 0 < len(t.value()) < FULL_AT + 2 * len(METRICS.body) + 4096
    got = t.drain()
    for _ in range(1000):
        if not t.value():
            break
        got += t.drain()
    assert got.count(b"HTTP/1.1 200 OK") == 201


def _traced_growth(run) -> int:
    """
    Bytes of Python memory still held after ``run()`` (tracemalloc).
    """
    import gc
    import tracemalloc

    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        run()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("pad", [60_000, 8_000], ids=["over the cache's head limit", "within"])
def test_distinct_heads_do_not_pile_up_in_the_head_memo(pad):
    """
    Connections that each send one complete head, every head different and
    large, leave the memory they cost behind them: the answer cache's memo of
    parsed heads is bounded by the bytes it holds, and heads longer than it
    ever parses are not kept at all.  (Before: up to 4,096 heads of any length
    a read brings, here 600 × 60 kB = 36 MB, kept for ever.)
    """
    site, clock = server()

    def run() -> None:
        for i in range(600):
            p, t = connect(site)
            p.dataReceived(get("/master", f"X-Pad: {i:06d}{'p' * pad}"))
            p.connectionLost(Failure(ConnectionDone()))

    assert _traced_growth(run) < 2 * 1024 * 1024


class CountingChannel:
    """
    Counts the bytes the front feeds to twisted.web's channels of ``site``.
    """

    def __init__(self, site) -> None:
        self.fed = 0
        real = site.connect_channel

        def connect(front):
            channel = real(front)
            feed = channel.dataReceived

            def counting(data: bytes) -> None:
                self.fed += len(data)
                feed(data)

            channel.dataReceived = counting
            return channel

        site.connect_channel = connect


BODY_413 = (b"HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
            b'{"error_text": "request body too large"}')


CHUNKED = b"POST /master HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
LENGTH = b"POST /master HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n"


@pytest.mark.parametrize(("head", "body"), [
    (LENGTH, b"\r\n" * 40_000),
    (LENGTH, b"a" * 80_000),
    (CHUNKED, b"1\r\n\n\r\n" * 20_000),
    (CHUNKED, (b"8000\r\n" + b"a" * 0x8000 + b"\r\n") * 3),
], ids=["CRLFs", "bytes", "tiny chunks", "large chunks"])
def test_a_request_body_over_16_kib_is_a_413(head, body):
    """
    No route takes a body: one over 16 KiB gets a 413 and the connection
    closes, after at most 16 KiB of it went to twisted.web, however it is
    cut.  (Before: twisted.web read any body whole, into a temporary file
    past 100 kB, and a body of bare CRLFs was fed a piece at a time with a
    copy of the rest each time: 80 ms of CPU per 64 kB.)
    """
    for chunk in (len(body), 1000):
        site, clock = server()
        counted = CountingChannel(site)
        p, t = connect(site)
        p.dataReceived(head)
        for i in range(0, len(body), chunk):
            p.dataReceived(body[i:i + chunk])
        assert t.value() == BODY_413
        assert t.disconnecting
        assert counted.fed <= len(head) + 16384


def test_a_dribbled_body_is_cut_at_the_request_deadline():
    """
    The head deadline runs until the request is whole, body included.
    (Before: it stopped at the end of the head, and twisted.web's idle
    timeout restarted with every byte: a chunk every 50 s held the
    connection, and its temporary file, for ever.)
    """
    site, clock = server(header_timeout=1.0, idle_timeout=60.0)
    p, t = connect(site)
    p.dataReceived(b"POST /master HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(4):
        p.dataReceived(b"1\r\na\r\n")
        clock.advance(0.4)
    assert t.disconnecting


def test_a_form_body_is_not_parsed():
    """
    twisted.web parses a form body (``application/x-www-form-urlencoded``)
    into request arguments by default, at ~30 times its size in memory; the
    site does not (no route reads one), and the request is answered as any
    POST: 405.
    """
    import gc
    import tracemalloc

    site, clock = server()
    body = b"a=1&" * 4000
    data = (b"POST /master HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body
    p, t = connect(site)
    gc.collect()
    tracemalloc.start()
    try:
        p.dataReceived(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert t.value().startswith(b"HTTP/1.1 405 ")
    assert peak < 200_000


@pytest.mark.parametrize("star", [b"OPTIONS * HTTP/1.1\r\n\r\n", b"GET * HTTP/1.1\r\n\r\n"])
def test_a_star_request_leaves_the_next_head_its_deadline(star):
    """
    twisted.web answers a ``*`` request itself, without looking up a
    resource; the front still sees it whole, so the next head has its
    deadline and its size limit.  (Before: the front never learnt the
    request was whole and took the next head for its body.)
    """
    site, clock = server(header_timeout=1.0, idle_timeout=60.0)
    p, t = connect(site)
    p.dataReceived(star)
    assert t.value().startswith((b"HTTP/1.1 200 OK", b"HTTP/1.1 405 "))
    p.dataReceived(b"GET /master HTTP/1.1\r\nX: ")
    for _ in range(4):
        clock.advance(0.5)
    assert t.disconnecting
    site, clock = server()
    p, t = connect(site)
    p.dataReceived(star + b"GET /master HTTP/1.1\r\nX-Big: " + b"a" * 20000)
    assert t.value().endswith(b'{"error_text": "request head too large"}')


def test_pipelined_requests_wait_for_a_slow_reader_until_the_idle_timeout():
    """
    Whole requests behind answers the client has not read yet are not a
    head in progress: the connection waits for its reader until the idle
    timeout, not the head deadline.  (Before: aborted at the head
    deadline.)
    """
    site, clock = server(header_timeout=1.0, idle_timeout=60.0)
    p, t = connect(site, SlowReader())
    p.dataReceived(get("/metrics") * 5)
    assert t.full
    clock.advance(30)
    assert not t.disconnecting
    assert t.drain().count(b"HTTP/1.1 200 OK") >= 2
    clock.advance(30)
    assert not t.disconnecting
    for _ in range(130):
        clock.advance(0.5)
    assert t.disconnecting


@pytest.mark.parametrize("extra", [(), ("Content-Length: 0",)], ids=["cache", "Klein"])
def test_a_waiting_read_ends_when_its_client_goes(extra, log_events):
    """
    A fresh read waiting for a replica stops waiting (and asking for
    checks) when its connection is lost, on both paths, with no line logged
    above INFO.  (Before: the wait held its place, one of 10,000, until
    ``wait_ms`` ran out.)
    """
    clock = Clock()
    clock.advance(1_800_000_000)
    asked: list[int] = []
    fresh = FreshReads(clock, asked.append)
    v = view()
    api = make_api(lambda: v, CONFIG, "9.9.9", fresh=fresh, metrics=lambda: METRICS)
    site = make_site(api, clock)
    p, t = connect(site)
    p.dataReceived(get("/replica?min_lsn=0/9000000&wait_ms=60000", *extra))
    assert fresh.waiting == 1
    p.connectionLost(Failure(ConnectionDone()))
    assert fresh.waiting == 0
    before = len(asked)
    clock.advance(1)
    assert len(asked) == before
    assert [e for e in log_events if e.get("log_level") in
            (LogLevel.warn, LogLevel.error, LogLevel.critical)] == []
