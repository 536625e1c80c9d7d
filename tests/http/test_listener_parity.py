"""
The same answers on every listener: ``tcp:``, ``tcp6:`` (IPv6 loopback),
``unix:``, ``ssl:`` and ``haproxy:tcp:`` (a PROXY header first) listeners,
each with the API's HTTP server (the front, ``/metrics`` included), and a
plain twisted.web site serving the same Klein resource with no front at all
on a listener of its own, are sent the same byte streams (hostile ones
among them); every listener must answer the bytes the plain site answers
(``Date`` aside) and leave the connection in the same state.  On a UNIX
socket a request without ``Host`` that reached Klein was answered an HTML
``500`` with a critical log line (the local address has no host); it is now
answered as on TCP, without an error line.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Callable

import pytest
import pytest_twisted
import test_listen
from http_apis import make_api, make_site
from test_front import CONFIG, view
from twisted.internet import threads
from twisted.internet.defer import gatherResults
from twisted.logger import Logger, LogLevel

from pgstatus.config.provider import ConfigProvider
from pgstatus.http.metrics import MetricsRenderer
from pgstatus.listening import ListenerService, description_candidates
from pgstatus.model.stats import FollowStats, Histogram, HostCounters

log = Logger(namespace="test")
DEADLINE = test_listen.DEADLINE
#: test_listen's throwaway certificate (a fixture)
certificate = test_listen.certificate
#: how long a connection that stays open is watched for more bytes
QUIET = 0.4

#: (name, bytes): each sent on a connection of its own, in this order
STREAMS = [
    ("one-request", b"GET /master HTTP/1.1\r\nHost: pg-status\r\nConnection: close\r\n\r\n"),
    ("keep-alive", b"GET /replica HTTP/1.1\r\nHost: pg-status\r\n\r\n"),
    ("pipelined", b"GET /master HTTP/1.1\r\nHost: x\r\n\r\nHEAD /hosts HTTP/1.1\r\n\r\n"
                  b"GET /hosts HTTP/1.1\r\nAccept: application/json\r\n\r\n"
                  b"GET /metrics HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\n"
                  b"GET /status HTTP/1.1\r\nConnection: close\r\n\r\n"),
    ("unknown-path-no-host", b"GET /nope HTTP/1.1\r\n\r\n"),
    ("http10-connection", b"GET /master HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
    ("http10-metrics", b"GET /metrics HTTP/1.0\r\nConnection: close\r\n\r\n"),
    ("metrics-no-host", b"GET /metrics HTTP/1.1\r\n\r\n"),
    ("openapi-no-host-close", b"GET /openapi.json HTTP/1.1\r\nConnection: close\r\n\r\n"),
    ("bad-method", b"POST /master HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
    ("malformed", b"GET /master HTTP/1.1\nHost: x\r\n\r\n"),
    ("smuggled-lf", b"GET /live HTTP/1.1\r\nHost: x\nContent-Length: 24\r\n\r\n"
                    b"GET /hosts HTTP/1.1\r\n\r\n"),
    ("cl-te", b"GET /master HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"0\r\n\r\n"),
    ("obs-fold", b"GET /master HTTP/1.1\r\nX: a\r\n b\r\n\r\n"),
    ("two-hosts", b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    ("absolute-form", b"GET http://x/master HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("keep-alive-then-close", b"GET /master HTTP/1.1\r\nConnection: keep-alive\r\n"
                              b"Connection: close\r\n\r\nGET /live HTTP/1.1\r\n\r\n"),
    ("body-then-pipeline", b"GET /master HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                           b"GET /live HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"),
]
_DATE = re.compile(rb"\r\nDate: [^\r]*")


class Stats:
    """
    The monitor side's counters, all zero (``/metrics`` reads them).
    """

    def host_counters(self) -> list[HostCounters]:
        return [HostCounters(0, 0, 0, 0, Histogram()) for _ in range(4)]

    def follow_stats(self) -> FollowStats:
        return FollowStats("hub")


def server(reactor, enabled: bool = True):
    """
    The API's HTTP server, ``/metrics`` included, with counters of its own
    (``enabled=False``: plain twisted.web serving the same Klein resource,
    with no front at all).
    """
    api = make_api(view, CONFIG, "9.9.9", clock=reactor)
    api.metrics = MetricsRenderer(view, Stats(), api.renderer, lambda: None,
                                  ConfigProvider(CONFIG))
    return make_site(api, reactor, enabled)


def read_all(s: socket.socket) -> tuple[bytes, str]:
    """
    Read until the server closes (``closed``) or stays quiet for
    :data:`QUIET` seconds (``open``).
    """
    out = b""
    s.settimeout(QUIET)
    try:
        while chunk := s.recv(65536):
            out += chunk
    except TimeoutError:
        return out, "open"
    except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
        pass
    return out, "closed"


def conversations(connect: Callable[[], socket.socket]) -> list[tuple[str, bytes, str]]:
    """
    Every stream on a connection of its own: the answers (``Date``
    normalised) and the connection's fate.
    """
    out = []
    for name, data in STREAMS:
        with connect() as s:
            s.sendall(data)
            got, fate = read_all(s)
        out.append((name, _DATE.sub(b"\r\nDate: -", got), fate))
    return out


def connectors(ports: dict, key, cert) -> dict[str, Callable[[], socket.socket]]:
    def tcp(family: int, host: str, number: int, header: bytes = b"") -> socket.socket:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(DEADLINE)
        s.connect((host, number))
        if header:
            s.sendall(header)
        return s

    def unix() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(DEADLINE)
        s.connect(ports["unix"])
        return s

    context = ssl.create_default_context(cafile=str(cert))
    context.set_alpn_protocols(["h2", "http/1.1"])

    def tls() -> socket.socket:
        return context.wrap_socket(tcp(socket.AF_INET, "127.0.0.1", ports["ssl"]),
                                   server_hostname="localhost")

    return {
        "tcp": lambda: tcp(socket.AF_INET, "127.0.0.1", ports["tcp"]),
        "tcp6": lambda: tcp(socket.AF_INET6, "::1", ports["tcp6"]),
        "unix": unix,
        "ssl": tls,
        "haproxy": lambda: tcp(socket.AF_INET, "127.0.0.1", ports["haproxy"],
                               b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\r\n"),
        "plain": lambda: tcp(socket.AF_INET, "127.0.0.1", ports["plain"]),
    }


@pytest.fixture
def listeners(reactor, certificate, tmp_path):
    """
    One listener of each type, each with a server of its own: the
    connectors by type.
    """
    key, cert = certificate
    path = str(tmp_path / "http.sock")
    descriptions = {
        "tcp": "tcp:0:interface=127.0.0.1",
        "tcp6": r"tcp6:0:interface=\:\:1",
        "unix": f"unix:{path}",
        "ssl": f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        "haproxy": "haproxy:tcp:0:interface=127.0.0.1",
        "plain": "tcp:0:interface=127.0.0.1",
    }
    services, ports = [], {}
    for kind, description in descriptions.items():
        svc = ListenerService(description_candidates(reactor, description),
                              server(reactor, kind != "plain"), log, "server", ("test", 0))
        svc.startService()
        services.append(svc)
        ports[kind] = path if kind == "unix" else svc.port.getHost().port
    yield connectors(ports, key, cert)
    for svc in services:
        pytest_twisted.blockon(svc.stopService())


def serious(log_events) -> list[str]:
    return [line for e, line in zip(list(log_events), log_events.text(), strict=True)
            if e.get("log_level") in (LogLevel.error, LogLevel.critical) or "log_failure" in e]


@pytest_twisted.inlineCallbacks
def test_every_listener_answers_the_same_bytes(listeners, log_events):
    kinds = list(listeners)
    results = yield gatherResults([threads.deferToThread(conversations, listeners[k])
                                   for k in kinds])
    got = dict(zip(kinds, results, strict=True))
    # plain twisted.web, no front: what every listener's front must match
    reference = got["plain"]
    # the streams were answered as meant (no 500, the right fates)
    fates = {name: (answer.split(b"\r\n", 1)[0], fate) for name, answer, fate in reference}
    assert fates == {
        "one-request": (b"HTTP/1.1 200 OK", "closed"),
        "keep-alive": (b"HTTP/1.1 200 OK", "open"),
        "pipelined": (b"HTTP/1.1 200 OK", "closed"),
        "unknown-path-no-host": (b"HTTP/1.1 404 Not Found", "open"),
        "http10-connection": (b"HTTP/1.0 200 OK", "closed"),
        "http10-metrics": (b"HTTP/1.0 200 OK", "closed"),
        "metrics-no-host": (b"HTTP/1.1 200 OK", "open"),
        "openapi-no-host-close": (b"HTTP/1.1 200 OK", "closed"),
        "bad-method": (b"HTTP/1.1 405 Method Not Allowed", "open"),
        "malformed": (b"HTTP/1.1 400 Bad Request", "closed"),
        "smuggled-lf": (b"HTTP/1.1 400 Bad Request", "closed"),
        "cl-te": (b"HTTP/1.1 400 Bad Request", "closed"),
        "obs-fold": (b"HTTP/1.1 200 OK", "open"),
        "two-hosts": (b"HTTP/1.1 200 OK", "open"),
        "absolute-form": (b"HTTP/1.1 404 Not Found", "open"),
        "keep-alive-then-close": (b"HTTP/1.1 200 OK", "open"),
        "body-then-pipeline": (b"HTTP/1.1 200 OK", "open"),
    }
    assert [a.count(b"HTTP/1.1 ") for name, a, _ in reference if name == "pipelined"] == [6]
    for kind in kinds:
        for ours, theirs in zip(got[kind], reference, strict=True):
            assert ours == theirs, (kind, ours[0])
    assert serious(log_events) == []


@pytest.mark.parametrize("request_", [
    b"GET /metrics HTTP/1.1\r\n\r\n",
    b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET /nope HTTP/1.1\r\n\r\n",
    b"GET /nope HTTP/1.1\r\nHost:\r\n\r\n",
], ids=["metrics", "http10-connection", "unknown-path", "empty-host"])
@pytest_twisted.inlineCallbacks
def test_unix_socket_without_host_answers_as_tcp(listeners, log_events, request_):
    """
    Before, an HTML ``500`` and a critical ``'UNIXAddress' object has no
    attribute 'host'`` line.
    """
    def both() -> list[tuple[bytes, str]]:
        out = []
        for kind in ("tcp", "unix"):
            with listeners[kind]() as s:
                s.sendall(request_)
                got, fate = read_all(s)
            out.append((_DATE.sub(b"\r\nDate: -", got), fate))
        return out

    tcp, unix = yield threads.deferToThread(both)
    assert re.match(rb"HTTP/1\.[01] [24]0[04] ", tcp[0]), tcp[0][:40]
    assert unix == tcp
    assert serious(log_events) == []
