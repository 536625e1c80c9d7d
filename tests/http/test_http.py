"""
The HTTP surface through a real listening socket and treq: status codes,
exact bodies, content types, negotiation, HEAD, 405 and 404, readiness
before validation, and a failing handler that does not take the service
down.  Host states are hand-built; the fast path and Klein are both
exercised (a request the fast path does not take goes to Klein).
"""

from __future__ import annotations

import json

import pytest
import pytest_twisted
import treq
from http_apis import make_api, make_site
from twisted.web.client import HTTPConnectionPool

from pgstatus.config.environ import load_config
from pgstatus.model.selection import select_master
from pgstatus.model.status import HostStatus, View

CONFIG = load_config({"pg_status__hosts": "m,r1,r2"})


def hosts(master_alive: bool = True, replicas_alive: bool = True) -> tuple[HostStatus, ...]:
    return (
        HostStatus(0, "m", None, None, checked=True, reached=True, alive=master_alive,
                   possible_dead=not master_alive, master=master_alive,
                   lag_ms=0 if master_alive else None, lag_bytes=0 if master_alive else None,
                   lsn=0x3000060 if master_alive else None, timeline=1,
                   sync_by_time=master_alive, sync_by_bytes=master_alive),
        HostStatus(1, "r1", None, None, checked=True, reached=True, alive=replicas_alive,
                   possible_dead=not replicas_alive, lag_ms=5 if replicas_alive else None,
                   lag_bytes=100 if replicas_alive else None,
                   lsn=0x3000000 if replicas_alive else None, timeline=1,
                   sync_by_time=replicas_alive, sync_by_bytes=replicas_alive),
        HostStatus(2, "r2", None, None, checked=True, reached=True, alive=replicas_alive,
                   possible_dead=not replicas_alive, lag_ms=2000 if replicas_alive else None,
                   lag_bytes=2_000_000 if replicas_alive else None,
                   lsn=0x2000000 if replicas_alive else None, timeline=1),
    )


class Holder:
    def __init__(self) -> None:
        self.view = View(hosts(), select_master(hosts()), True, 1)
        self.broken = False

    def __call__(self) -> View:
        if self.broken:
            raise RuntimeError("boom")
        return self.view


@pytest.fixture
def server(reactor):
    holder = Holder()
    api = make_api(holder, CONFIG, "1.2.3")
    port = reactor.listenTCP(0, make_site(api, reactor),
                      interface="127.0.0.1")
    pool = HTTPConnectionPool(reactor, persistent=False)
    base = f"http://127.0.0.1:{port.getHost().port}"

    def get(path: str, method: str = "GET", accept: str | None = None):
        headers = {"Accept": accept} if accept else {}
        d = treq.request(method, base + path, headers=headers, pool=pool)

        def read(r):
            return r.content().addCallback(lambda body: (r, body))

        return d.addCallback(read)

    yield holder, get
    pytest_twisted.blockon(port.stopListening())
    pytest_twisted.blockon(pool.closeCachedConnections())


def ctype(r) -> str | None:
    v = r.headers.getRawHeaders("content-type")
    return v[0] if v else None


@pytest.mark.parametrize("path,code,body,content_type", [
    ("/master", 200, b"m", "text/plain; charset=utf-8"),
    ("/replica?lag_bytes=100", 200, b"r1", "text/plain; charset=utf-8"),
    ("/sync_by_time", 200, b"r1", "text/plain; charset=utf-8"),
    ("/sync_by_bytes?lag_bytes=0", 200, b"m", "text/plain; charset=utf-8"),
    ("/most_sync_by_bytes", 200, b"r1", "text/plain; charset=utf-8"),
    ("/replica?lag_ms=abc", 400, b'{"error_text": "Invalid lag_ms"}', "application/json"),
    ("/replica?lag_bytes=-1", 400, b'{"error_text": "Invalid lag_bytes"}', "application/json"),
    ("/replica?min_lsn=3000060", 400, b'{"error_text": "Invalid min_lsn"}', "application/json"),
    ("/replica?timeline=0", 400, b'{"error_text": "Invalid timeline"}', "application/json"),
    ("/status", 400, b'{"error_text": "Get parameter \'host\' wasn\'t passed"}',
     "application/json"),
    ("/status?host=zz", 404, b"", None),
    ("/nowhere", 404, b"", None),
    ("/version", 200, b"1.2.3", "text/plain; charset=utf-8"),
    ("/live", 200, b"OK", "text/plain; charset=utf-8"),
    ("/ready", 200, b"OK", "text/plain; charset=utf-8"),
])
@pytest_twisted.inlineCallbacks
def test_status_codes_and_bodies(server, path, code, body, content_type):
    _, get = server
    r, got = yield get(path)
    assert (r.code, got, ctype(r)) == (code, body, content_type)


@pytest_twisted.inlineCallbacks
def test_hosts_and_status_json(server):
    _, get = server
    r, body = yield get("/hosts")
    assert r.code == 200 and ctype(r) == "application/json"
    data = json.loads(body)
    assert data[0] == {"host": "m", "dc": None, "geo": None, "master": True, "alive": True,
                       "possible_dead": False, "lag_ms": 0, "sync_by_time": True,
                       "lag_bytes": 0, "sync_by_bytes": True, "lsn": "0/3000060"}
    r, body = yield get("/status?host=r2")
    assert json.loads(body) == {"dc": None, "geo": None, "master": False, "alive": True,
                                "possible_dead": False, "lag_ms": 2000, "sync_by_time": False,
                                "lag_bytes": 2000000, "sync_by_bytes": False,
                                "lsn": "0/2000000"}


@pytest.mark.parametrize("accept", ["application/json", "text/plain, application/json",
                                    "application/json; charset=utf-8",
                                    "application/json;q=0.9, */*;q=0.1"])
@pytest_twisted.inlineCallbacks
def test_json_negotiation(server, accept):
    _, get = server
    r, body = yield get("/master", accept=accept)
    assert (r.code, ctype(r), json.loads(body)) == (
        200, "application/json", {"host": "m", "dc": None, "geo": None})


@pytest.mark.parametrize("accept", [None, "*/*", "text/plain", "application/jsonx"])
@pytest_twisted.inlineCallbacks
def test_text_when_json_not_asked(server, accept):
    _, get = server
    r, body = yield get("/master", accept=accept)
    assert (ctype(r), body) == ("text/plain; charset=utf-8", b"m")


@pytest_twisted.inlineCallbacks
def test_no_host_at_all(server):
    holder, get = server
    hs = hosts(master_alive=False, replicas_alive=False)
    holder.view = View(hs, select_master(hs), True, 2)
    for path in ["/master", "/replica", "/sync_by_time", "/most_sync_by_bytes"]:
        r, body = yield get(path)
        assert (r.code, body, ctype(r)) == (404, b"", None), path
        r, body = yield get(path, accept="application/json")
        assert r.code == 404 and json.loads(body) == {"host": None, "dc": None, "geo": None}


@pytest_twisted.inlineCallbacks
def test_head_and_other_methods(server):
    _, get = server
    r, body = yield get("/master", method="HEAD")
    assert (r.code, body) == (200, b"")
    assert r.headers.getRawHeaders("content-length") == ["1"]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        r, body = yield get("/master", method=method)
        assert (r.code, body, ctype(r)) == (405, b"", None), method
        assert r.headers.getRawHeaders("allow") == ["GET, HEAD"]


@pytest_twisted.inlineCallbacks
def test_not_ready_before_validation(server):
    holder, get = server
    holder.view = View(hosts(), None, False, 0)
    for path in ["/ready", "/master", "/replica?lag_ms=x", "/hosts", "/status",
                 "/sync_by_bytes?min_lsn=bad"]:
        r, body = yield get(path)
        assert (r.code, body, ctype(r)) == (
            503, b'{"error_text": "pg_monitor is not ready"}', "application/json"), path
    r, body = yield get("/live")
    assert (r.code, body) == (200, b"OK")


@pytest_twisted.inlineCallbacks
def test_handler_error_is_500_and_service_keeps_serving(server):
    holder, get = server
    holder.broken = True
    r, body = yield get("/replica?x=1&x=2")
    assert r.code == 500 and ctype(r) == "application/json"
    assert json.loads(body) == {"error_text": "internal error"}
    holder.broken = False
    r, body = yield get("/master")
    assert (r.code, body) == (200, b"m")


@pytest_twisted.inlineCallbacks
def test_duplicate_and_junk_parameters_never_500(server):
    _, get = server
    for path in ["/replica?lag_ms=1&lag_ms=x", "/replica?lag_ms=%ff%fe", "/replica?&&==&",
                 "/replica?min_lsn=%00", "/status?host=%ff", "/replica?timeline=99999999999999"]:
        r, _ = yield get(path)
        assert r.code in (200, 400, 404), (path, r.code)


def test_failed_requests_log_one_error_line_per_interval(log_events):
    """
    Requests that fail (a handler raising) are each answered 500 but logged
    at most once per ``ERROR_LOG_INTERVAL``, the line counting the failures
    since the last one.
    """
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport
    from twisted.logger import LogLevel

    from pgstatus.http.app import ERROR_LOG_INTERVAL

    clock = Clock()
    clock.advance(1_800_000_000)
    holder = Holder()
    holder.broken = True
    site = make_site(make_api(holder, CONFIG, "1", clock=clock), clock)

    def fail_once() -> bytes:
        t = StringTransport()
        p = site.buildProtocol(None)
        p.makeConnection(t)
        p.dataReceived(b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n")
        return t.value()

    def lines() -> list[int]:
        return [e["failures"] for e in log_events
                if e.get("log_level") == LogLevel.error and "failures" in e]

    assert fail_once().startswith(b"HTTP/1.1 500 ")
    assert lines() == [1]
    for _ in range(4):
        assert fail_once().startswith(b"HTTP/1.1 500 ")
    assert lines() == [1]
    clock.advance(ERROR_LOG_INTERVAL)
    fail_once()
    assert lines() == [1, 5]
