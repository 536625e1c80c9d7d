"""
``haproxy:`` listeners (the PROXY header read by our strict wrapper) and
the listen backlog of endpoint listeners, on real sockets with the API's
HTTP server: a malformed header closes the connection without an answer
and without an error line, ``PROXY UNKNOWN`` and version 2 headers are
answered, a header dribbled byte by byte or sent with the requests in one
segment leaves the requests intact, and ``tcp:``, ``tcp6:``, ``unix:``,
``ssl:`` and ``haproxy:`` listeners get a backlog of ``SOMAXCONN`` unless
the description sets one.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import pytest
import pytest_twisted
import test_listen
from twisted.internet import threads
from twisted.logger import Logger, LogLevel
from twisted.web.resource import Resource
from twisted.web.server import Site

from pgstatus.listening import ListenerService, description_candidates

HAPROXY = "haproxy:tcp:0:interface=127.0.0.1"
V1 = b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\r\n"
V2 = (b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c" + bytes([10, 1, 2, 3, 192, 0, 2, 7])
      + struct.pack("!HH", 40000, 8000))
log = Logger(namespace="test")
DEADLINE = test_listen.DEADLINE
#: test_listen's fixtures: a listener for the API, a throwaway certificate
serve = test_listen.serve
certificate = test_listen.certificate
MASTER = b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n"


def talk(number: int, chunks: list[bytes], pause: float = 0.0) -> tuple[bytes, str]:
    """
    Send ``chunks`` (``pause`` seconds apart, each in its own segment),
    then read to the end: what came back and how it ended (``eof``,
    ``reset``; ``open`` if nothing ended it within the deadline).
    """
    with socket.create_connection(("127.0.0.1", number), timeout=DEADLINE) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for chunk in chunks:
                s.sendall(chunk)
                if pause:
                    time.sleep(pause)
        except (BrokenPipeError, ConnectionResetError):
            return b"", "reset"
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            return out, "reset"
        except TimeoutError:
            return out, "open"
        return out, "eof"


def serious(log_events) -> list[dict]:
    """
    The events at error or critical level, or with a failure.
    """
    return [e for e in log_events
            if e.get("log_level") in (LogLevel.error, LogLevel.critical) or "log_failure" in e]


@pytest.mark.parametrize("header", [
    b"PROXY TCP4 10.1.2.3 192.0.2.7 40000 8000\n",
    b"PROXY TCP4 256.0.0.1 192.0.2.7 40000 8000\r\n",
    b"PROXY TCP4 10.1.2.3 192.0.2.7 99999 8000\r\n",
    b"PROXY UNKNOWN " + b"x" * 100 + b"\r\n",
    b"GET /master HTTP/1.1\r\n",
], ids=["bare-lf", "address-256", "port-99999", "over-107-bytes", "no-header"])
@pytest_twisted.inlineCallbacks
def test_a_bad_header_closes_without_answer_or_error_line(reactor, serve, log_events, header):
    """
    Twisted's wrapper logged a critical ``Unhandled Error`` for the bare LF
    and answered the impossible address and port; ours closes, silently.
    """
    site, port = serve(description_candidates(reactor, HAPROXY))
    got, end = yield threads.deferToThread(talk, port.getHost().port, [header + MASTER])
    assert got == b"" and end in ("eof", "reset")
    assert serious(log_events) == []


@pytest.mark.parametrize("header", [b"PROXY UNKNOWN\r\n", b"PROXY UNKNOWN ::1 ::1 1 2\r\n", V2],
                         ids=["unknown", "unknown-with-addresses", "v2"])
@pytest_twisted.inlineCallbacks
def test_unknown_and_v2_headers_are_answered(reactor, serve, header):
    """
    ``PROXY UNKNOWN`` (a proxy that cannot name the client) keeps the real
    addresses; Twisted's wrapper closed such a connection.
    """
    site, port = serve(description_candidates(reactor, HAPROXY))
    got, end = yield threads.deferToThread(talk, port.getHost().port, [header + MASTER])
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\npg-1")
    assert end == "eof"


class Addresses(Resource):
    """
    Answers the client's and the server's address as twisted.web sees them.
    """

    isLeaf = True

    def render_GET(self, request) -> bytes:
        peer, host = request.getClientAddress(), request.getHost()
        return f"{peer.host}:{peer.port} {host.host}:{host.port}".encode()


@pytest.mark.parametrize("header, seen", [
    (V1, b"10.1.2.3:40000 192.0.2.7:8000"),
    (V2, b"10.1.2.3:40000 192.0.2.7:8000"),
    (b"\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24" + bytes(15) + b"\x01" + bytes(15) + b"\x02"
     + struct.pack("!HH", 1, 2), b"::1:1 ::2:2"),
    (b"PROXY UNKNOWN\r\n", None),
], ids=["v1", "v2", "v2-tcp6", "unknown"])
@pytest_twisted.inlineCallbacks
def test_twisted_web_sees_the_proxied_addresses(reactor, header, seen):
    site = Site(Addresses())
    svc = ListenerService(description_candidates(reactor, HAPROXY), site, log, "server",
                          ("test", 0))
    svc.startService()
    try:
        number = svc.port.getHost().port
        got, _ = yield threads.deferToThread(
            talk, number, [header + b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"])
    finally:
        yield svc.stopService()
    body = got.partition(b"\r\n\r\n")[2]
    if seen is None:
        # the real connection's addresses
        peer, host = body.split(b" ")
        assert peer.startswith(b"127.0.0.1:") and host == b"127.0.0.1:%d" % number
    else:
        assert body == seen


@pytest.mark.parametrize("header", [V1, V2, b"PROXY UNKNOWN\r\n"], ids=["v1", "v2", "unknown"])
@pytest_twisted.inlineCallbacks
def test_a_dribbled_header_and_requests_arrive_intact(reactor, serve, header):
    """
    One byte a segment: Twisted's wrapper closed a connection whose first
    segment was shorter than 8 (version 1) or 16 bytes (version 2).
    """
    site, port = serve(description_candidates(reactor, HAPROXY))
    stream = header + b"GET /version HTTP/1.1\r\n\r\n" + MASTER
    got, end = yield threads.deferToThread(
        talk, port.getHost().port, [bytes([b]) for b in stream], 0.002)
    assert got.count(b"HTTP/1.1 200 OK\r\n") == 2 and got.endswith(b"\r\n\r\npg-1")
    assert b"\r\n\r\n9.9.9HTTP/1.1 200 OK\r\n" in got and end == "eof"


@pytest.mark.parametrize("header", [V1, V2], ids=["v1", "v2"])
@pytest_twisted.inlineCallbacks
def test_header_and_pipelined_requests_in_one_segment(reactor, serve, header):
    site, port = serve(description_candidates(reactor, HAPROXY))
    stream = header + b"GET /version HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n" + MASTER
    got, end = yield threads.deferToThread(talk, port.getHost().port, [stream])
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.count(b"HTTP/1.1 ") == 3
    assert got.endswith(b"\r\n\r\npg-1") and end == "eof"


def listen_queue(port) -> list[int]:
    """
    The listen queue length the kernel reports (``ss``, Send-Q) for a
    listening port.
    """
    address = port.getHost()
    if hasattr(address, "port"):
        args = ["ss", "-ltnH", f"sport = :{address.port}"]
    else:
        name = address.name.decode() if isinstance(address.name, bytes) else address.name
        args = ["ss", "-lxH", "src", name]
    lines = subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines()
    return [int(line.split()[2 if hasattr(address, "port") else 3]) for line in lines]


@pytest.mark.parametrize("kind", ["tcp", "tcp6", "unix", "ssl", "haproxy"])
def test_endpoint_listeners_have_a_large_backlog(reactor, serve, certificate, tmp_path, kind):
    """
    Twisted's default backlog is 50: the 54th quick connect to a busy
    server failed.  The kernel caps the queue at ``net.core.somaxconn``.
    """
    key, cert = certificate

    def description(name: str) -> str:
        return {
            "tcp": "tcp:0:interface=127.0.0.1",
            "tcp6": r"tcp6:0:interface=\:\:1",
            "unix": f"unix:{tmp_path / name}",
            "ssl": f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
            "haproxy": HAPROXY,
        }[kind]

    site, port = serve(description_candidates(reactor, description("a.sock")))
    queues = listen_queue(port)
    assert queues and min(queues) >= 128, queues
    # a backlog the description sets is kept
    site, port = serve(description_candidates(reactor, description("b.sock") + ":backlog=77"))
    assert listen_queue(port) == [77]


@pytest.mark.parametrize("description, expected", [
    ("tcp:8000", "tcp:8000:backlog=N"),
    (r"tcp6:8000:interface=\:\:", r"tcp6:8000:interface=\:\::backlog=N"),
    ("unix:/run/http.sock:mode=660", "unix:/run/http.sock:mode=660:backlog=N"),
    ("ssl:8443:privateKey=k.pem", "ssl:8443:privateKey=k.pem:backlog=N"),
    # set by the description: as a keyword, or as the positional argument
    ("tcp:8000:backlog=10", "tcp:8000:backlog=10"),
    ("tcp:8000:127.0.0.1:10", "tcp:8000:127.0.0.1:10"),
    ("tcp6:8000:10", "tcp6:8000:10"),
    ("unix:/run/http.sock:660:10", "unix:/run/http.sock:660:10"),
    ("ssl:8443:k.pem:c.pem:SSLv23_METHOD:127.0.0.1:10",
     "ssl:8443:k.pem:c.pem:SSLv23_METHOD:127.0.0.1:10"),
    # an escaped colon is no separator, an escaped "=" no keyword
    (r"unix:/run/a\:b:mode=660", r"unix:/run/a\:b:mode=660:backlog=N"),
    # other endpoint types are left alone, and so is a lone final backslash
    ("systemd:domain=INET:index=0", "systemd:domain=INET:index=0"),
    ("tcp:8000:interface=x\\", "tcp:8000:interface=x\\"),
])
def test_with_backlog(description, expected):
    from pgstatus.listening import with_backlog

    assert with_backlog(description, 999) == expected.replace("=N", "=999")


def test_haproxy_descriptions_are_checked_as_they_will_listen(reactor):
    from pgstatus.config.settings import ConfigError
    from pgstatus.listening import description_endpoint
    from pgstatus.proxyheader import ProxyHeaderEndpoint
    from pgstatus.tap import check_endpoint

    assert isinstance(description_endpoint(reactor, HAPROXY), ProxyHeaderEndpoint)
    assert isinstance(description_endpoint(reactor, "HAProxy:unix:/x.sock"), ProxyHeaderEndpoint)
    check_endpoint(reactor, HAPROXY)
    for bad in ["haproxy:tcp:notaport", "haproxy:", "haproxy:nonsense:1"]:
        with pytest.raises(ConfigError):
            check_endpoint(reactor, bad)
