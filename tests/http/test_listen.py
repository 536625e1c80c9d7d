"""
Listening where users need it and holding up against clients that
misbehave, on real sockets: endpoint descriptions (``tcp6:``, ``unix:``,
``ssl:`` with a certificate ``openssl`` makes here), the default
``TCP_DEFER_ACCEPT`` listener, a bad description refused before
listening, a client that never reads its answers (the server stops
reading, on both paths), and a client dribbling a head after the hand-over
to twisted.web (cut at the head deadline).
"""

from __future__ import annotations

import os
import socket
import ssl
import stat
import subprocess
import time

import pytest
import pytest_twisted
from http_apis import make_api, make_site
from test_front import CONFIG, view
from twisted.internet import threads
from twisted.logger import Logger

from pgstatus.config.settings import ConfigError
from pgstatus.listening import (
    ListenerService,
    deferred_accept_candidates,
    description_candidates,
)
from pgstatus.tap import check_endpoint

DEADLINE = 10.0
log = Logger(namespace="test")


@pytest.fixture
def serve(reactor):
    """
    Start a listener for the API on given candidates; stopped afterwards.
    """
    started = []

    def make(candidates, **limits):
        v = view()
        site = make_site(make_api(lambda: v, CONFIG, "9.9.9"), reactor, **limits)
        svc = ListenerService(candidates, site, log, "server", ("test", 0))
        svc.startService()
        started.append(svc)
        return site, svc.port

    yield make
    for svc in started:
        pytest_twisted.blockon(svc.stopService() or _done())


def _done():
    from twisted.internet.defer import succeed

    return succeed(None)


def exchange(sock: socket.socket, data: bytes) -> bytes:
    sock.settimeout(DEADLINE)
    sock.sendall(data)
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


@pytest_twisted.inlineCallbacks
def test_tcp6_description(reactor, serve):
    _, port = serve(description_candidates(reactor, r"tcp6:0:interface=\:\:1"))
    number = port.getHost().port

    def client() -> bytes:
        with socket.create_connection(("::1", number), timeout=DEADLINE) as s:
            return exchange(s, b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n")

    data = yield threads.deferToThread(client)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\npg-1")


@pytest_twisted.inlineCallbacks
def test_unix_socket_description_with_mode(reactor, serve, tmp_path):
    path = str(tmp_path / "http.sock")
    site, _ = serve(description_candidates(reactor, f"unix:{path}:mode=660"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o660

    def client() -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(DEADLINE)
            s.connect(path)
            return exchange(s, b"GET /hosts HTTP/1.1\r\nAccept: application/json\r\n"
                               b"Connection: close\r\n\r\n")

    data = yield threads.deferToThread(client)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b'"host": "pg-1"' in data


@pytest.fixture
def certificate(tmp_path):
    """
    A self-signed key and certificate for localhost, made by openssl now.
    """
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    return key, cert


@pytest_twisted.inlineCallbacks
def test_tls_description(reactor, serve, certificate):
    """
    ``ssl:``: the API over TLS, the shortcut answering (through the TLS
    transport, never the raw socket) and twisted.web after a hand-over.
    """
    key, cert = certificate
    site, port = serve(description_candidates(
        reactor, f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"))
    number = port.getHost().port
    context = ssl.create_default_context(cafile=str(cert))
    # as curl and browsers do: offer HTTP/2 and HTTP/1.1; 1.1 is chosen
    context.set_alpn_protocols(["h2", "http/1.1"])

    def client() -> bytes:
        with socket.create_connection(("127.0.0.1", number), timeout=DEADLINE) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as s:
                assert s.selected_alpn_protocol() == "http/1.1"
                s.sendall(b"GET /master HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"
                          b"GET /live HTTP/1.1\r\nConnection: close\r\n\r\n")
                out = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        return out
                    out += chunk

    data = yield threads.deferToThread(client)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert data.count(b"HTTP/1.1 ") == 3 and data.endswith(b"\r\n\r\nOK")


def test_bad_descriptions_are_configuration_errors(reactor):
    for bad in ["nonsense:1", "tcp:notaport"]:
        with pytest.raises(ConfigError) as e:
            check_endpoint(reactor, bad)
        assert e.value.variable == "pg_status__http_listen"
    check_endpoint(reactor, "tcp:0:interface=127.0.0.1")


@pytest_twisted.inlineCallbacks
def test_default_listener_defers_accept(reactor, serve):
    site, port = serve(deferred_accept_candidates(reactor, "127.0.0.1", 0, 1))
    number = port.getHost().port
    fd = port.fileno()
    listening = socket.socket(fileno=os.dup(fd))
    try:
        assert listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT) > 0
    finally:
        listening.close()

    def client() -> bytes:
        with socket.create_connection(("127.0.0.1", number), timeout=DEADLINE) as s:
            return exchange(s, b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n")

    data = yield threads.deferToThread(client)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")


def flood(number: int, request: bytes, total: int) -> int:
    """
    Pipeline ``request`` without ever reading; the bytes the server took
    before its reading stopped (or ``total``).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        s.connect(("127.0.0.1", number))
        s.setblocking(False)
        # a whole number of requests: sending the stream on from where the
        # last send stopped keeps the requests whole
        chunk = request * (65536 // len(request) + 1)
        sent = 0
        stalled_since = None
        while sent < total:
            try:
                sent += s.send(chunk[sent % len(chunk):])
                stalled_since = None
            except BlockingIOError:
                now = time.monotonic()
                if stalled_since is None:
                    stalled_since = now
                elif now - stalled_since > 2.0:
                    return sent
                time.sleep(0.01)
        return sent


@pytest.mark.parametrize("path", [b"/hosts", b"/metrics"], ids=["shortcut", "twisted.web"])
@pytest_twisted.inlineCallbacks
def test_a_client_that_never_reads_stops_the_server_reading(reactor, serve, path):
    """
    Pipelined requests from a client that reads no answer: the server's
    buffer fills, it stops reading, and the client's sending stalls long
    before it has sent 64 MiB (without flow control the server would read,
    answer and buffer all of it).
    """
    site, port = serve(description_candidates(reactor, "tcp:0:interface=127.0.0.1"))
    total = 64 << 20
    sent = yield threads.deferToThread(
        flood, port.getHost().port, b"GET " + path + b" HTTP/1.1\r\n\r\n", total)
    assert sent < total // 4, sent


@pytest_twisted.inlineCallbacks
def test_dribbling_head_is_cut_after_the_hand_over_too(reactor, serve):
    """
    After a request twisted.web answers (``/metrics``), a client sending
    its next head one byte at a time is cut at the head deadline, though
    every byte resets twisted.web's own idle timer.
    """
    site, port = serve(description_candidates(reactor, "tcp:0:interface=127.0.0.1"),
                       header_timeout=0.5, idle_timeout=30.0)
    number = port.getHost().port

    def client() -> tuple[bytes, float]:
        with socket.create_connection(("127.0.0.1", number), timeout=DEADLINE) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            first = s.recv(65536)
            t0 = time.monotonic()
            try:
                for b in b"GET /master HTTP/1.1\r\nX: " + b"y" * 100:
                    s.sendall(bytes([b]))
                    time.sleep(0.1)
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                while s.recv(65536):
                    pass
            except ConnectionResetError:
                pass
            return first, time.monotonic() - t0

    first, cut_after = yield threads.deferToThread(client)
    assert first.startswith(b"HTTP/1.1 ")
    assert cut_after < 3.0, cut_after


@pytest_twisted.inlineCallbacks
def test_start_line_names_a_unix_socket_path_as_text(reactor, tmp_path):
    """
    The start line of a UNIX socket listener names its path as text (not
    ``b'...'``) and ``port=unix``; a TCP listener its address and number.
    """
    from twisted.logger import formatEvent

    events: list[dict] = []
    lines = Logger(namespace="http", observer=events.append)
    path = str(tmp_path / "http.sock")
    site = make_site(make_api(view, CONFIG, "9.9.9"), reactor)
    unix = ListenerService(description_candidates(reactor, f"unix:{path}"), site, lines,
                           "server", ("test", 0))
    tcp = ListenerService(description_candidates(reactor, "tcp:0:interface=127.0.0.1"), site,
                          lines, "server", ("test", 0))
    unix.startService()
    tcp.startService()
    try:
        number = tcp.port.getHost().port
        shown = [formatEvent(e) for e in events]
        assert shown == [f"server started address={path} port=unix",
                         f"server started address=127.0.0.1 port={number}"]
    finally:
        for svc in (unix, tcp):
            yield svc.stopService() or _done()


def test_shown_address_forms():
    """
    The start line's address and port for each kind of listening address.
    """
    from twisted.internet.address import IPv4Address, UNIXAddress

    from pgstatus.listening import shown_address

    assert shown_address(IPv4Address("TCP", "127.0.0.1", 8000), "x") == ("127.0.0.1", 8000)
    assert shown_address(UNIXAddress(b"/run/pg-status/http.sock"), "x") == (
        "/run/pg-status/http.sock", "unix")
    assert shown_address(UNIXAddress(b"\0pg-status"), "x") == ("@pg-status", "unix")
    assert shown_address(object(), "label") == ("label", "-")
