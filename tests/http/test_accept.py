"""
The lean accept path (``pgstatus.http.accept``) on real sockets: a new
connection per request, IPv6 peers, the close without ``shutdown()`` (the
peer still reads the whole answer and a clean end of stream), and accept
errors left to Twisted's own recovery.
"""

from __future__ import annotations

import errno
import socket

import pytest
import pytest_twisted
from test_direct_send import DEADLINE, read_to_eof
from test_fastpath import CONFIG, view
from twisted.internet import threads
from twisted.logger import formatEvent

from pgstatus.http.accept import LeanPort, LeanServer, listen_lean
from pgstatus.http.api import StatusAPI
from pgstatus.http.fastpath import FastSite

REQUEST = b"GET /master HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@pytest.fixture
def lean(reactor):
    ports = []

    def make(interface: str = "127.0.0.1") -> tuple[FastSite, LeanPort]:
        v = view()
        api = StatusAPI(lambda: v, CONFIG, "9.9.9")
        site = FastSite(api.resource(), api.renderer, reactor)
        port = listen_lean(reactor, 0, site, interface)
        ports.append(port)
        return site, port

    yield make
    for p in ports:
        pytest_twisted.blockon(p.stopListening())


def one_request(host: str, port: int, family: int = socket.AF_INET) -> bytes:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(DEADLINE)
        s.connect((host, port))
        s.sendall(REQUEST)
        return read_to_eof(s)  # ends with the server's FIN, not a reset


@pytest_twisted.inlineCallbacks
def test_a_connection_per_request(lean):
    site, port = lean()
    answers = yield threads.deferToThread(
        lambda: [one_request("127.0.0.1", port.getHost().port) for _ in range(300)])
    assert all(a.startswith(b"HTTP/1.1 200 OK\r\n") and a.endswith(b"\r\n\r\npg-1")
               for a in answers), answers[:3]
    assert port.sessionno == 300
    assert site.connections == 0


@pytest_twisted.inlineCallbacks
def test_ipv6_peer(lean):
    if not socket.has_ipv6:
        pytest.fail("IPv6 is needed for this test")
    seen = []
    site, port = lean("::1")
    real = site.buildProtocol

    def spy(addr):
        p = real(addr)
        seen.append(addr)
        return p

    site.buildProtocol = spy
    answer = yield threads.deferToThread(one_request, "::1", port.getHost().port,
                                         socket.AF_INET6)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert seen and seen[0][0] == "::1"


@pytest_twisted.inlineCallbacks
def test_transports_are_lean_servers_and_report_the_peer(lean, reactor):
    site, port = lean()
    made = []
    real = site.buildProtocol

    def spy(addr):
        p = real(addr)
        made.append(p)
        return p

    site.buildProtocol = spy
    yield threads.deferToThread(one_request, "127.0.0.1", port.getHost().port)
    t = made[0].transport
    assert type(t) is LeanServer
    assert t.getPeer().host == "127.0.0.1"


class _FailingOnce:
    """The listening socket, with accept() failing once with ``code``."""

    def __init__(self, sock: socket.socket, code: int) -> None:
        self._sock = sock
        self._code = code

    def accept(self):
        if self._code:
            code, self._code = self._code, 0
            if code == errno.ECONNABORTED:
                # the pending connection is gone, as when the peer reset it
                skt, _ = self._sock.accept()
                skt.close()
            raise OSError(code, "injected")
        return self._sock.accept()

    def __getattr__(self, name):
        return getattr(self._sock, name)


@pytest_twisted.inlineCallbacks
def test_accept_errors_go_to_twisted(lean, reactor, log_events):
    """
    ECONNABORTED (the kernel's answer for a connection reset before it was
    accepted) goes to Twisted's loop, which logs it and carries on.
    """
    site, port = lean()
    port.socket = _FailingOnce(port.socket, errno.ECONNABORTED)

    def first():
        with socket.create_connection(("127.0.0.1", port.getHost().port), timeout=DEADLINE) as s:
            s.sendall(REQUEST)
            try:
                return read_to_eof(s)
            except ConnectionResetError:
                return b""

    yield threads.deferToThread(first)
    answer = yield threads.deferToThread(one_request, "127.0.0.1", port.getHost().port)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    texts = [formatEvent(e) for e in log_events]
    assert any("Could not accept new connection (ECONNABORTED)" in t for t in texts), texts


@pytest_twisted.inlineCallbacks
def test_out_of_descriptors_goes_to_twisted_loop(lean, reactor):
    """
    EMFILE hands the round to Twisted's accept loop (its recovery frees a
    reserved descriptor); the waiting connection is then served.
    """
    site, port = lean()
    port.socket = _FailingOnce(port.socket, errno.EMFILE)
    answer = yield threads.deferToThread(one_request, "127.0.0.1", port.getHost().port)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert port.socket._code == 0
