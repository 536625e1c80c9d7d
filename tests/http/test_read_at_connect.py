"""
The shortcut reads what arrived with a connection as the connection is made
(with ``TCP_DEFER_ACCEPT`` the request is there already).  Driven with a
transport over one end of a real socket pair, so that "at once" means
"before ``makeConnection`` returns"; then on real listeners, including a
``haproxy:`` one, whose wrapper must read the PROXY header first.
"""

from __future__ import annotations

import socket

import pytest
import pytest_twisted
from http_apis import make_api, make_site
from test_front import CONFIG, view
from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReadWriteDescriptor, ITCPTransport
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface import implementer

from pgstatus.http.answer import text


@implementer(ITCPTransport, IReadWriteDescriptor)
class SocketTransport(StringTransport):
    """
    A transport whose handle is a real socket; ``connectionLost`` records
    the reason and passes it on as a reactor would.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.lost: list = []

    def getHandle(self) -> socket.socket:
        return self.sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def doRead(self) -> None:
        raise AssertionError("the reactor does not drive this transport")

    def doWrite(self) -> None:
        raise AssertionError("the reactor does not drive this transport")

    def connectionLost(self, reason) -> None:
        self.lost.append(reason)
        self.sock.close()
        self.protocol.connectionLost(reason)


def connected(request: bytes, provides_descriptor: bool = True, answer=None, **limits):
    """
    A shortcut connection over a socket pair whose peer sent ``request``
    before the connection was made; returns (site, transport, peer).

    :param answer: wraps the answer function: ``answer(real)`` is used.
    """
    server, peer = socket.socketpair()
    server.setblocking(False)
    peer.settimeout(5)
    if request:
        peer.sendall(request)
    clock = Clock()
    v = view()
    site = make_site(make_api(lambda: v, CONFIG, "9.9.9"), clock, **limits)
    if answer is not None:
        site.cache.answer = answer(site.cache.answer)
    transport = SocketTransport(server) if provides_descriptor else _PlainTransport(server)
    protocol = site.buildProtocol(None)
    transport.protocol = protocol
    protocol.makeConnection(transport)
    return site, transport, peer


def read_available(peer: socket.socket) -> bytes:
    peer.setblocking(False)
    out = b""
    while True:
        try:
            chunk = peer.recv(65536)
        except BlockingIOError:
            return out
        if not chunk:
            return out + b"<EOF>"
        out += chunk


def test_request_with_close_is_queued_with_the_close_before_make_connection_returns():
    site, transport, peer = connected(b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n")
    # the last answer is left to the transport, which sends it and closes
    # in one go: nothing went to the socket directly
    assert read_available(peer) == b""
    got = transport.value()
    assert got.startswith(b"HTTP/1.1 200 OK\r\nConnection: close\r\n")
    assert got.endswith(b"\r\n\r\npg-1")
    # closed the usual way, once the transport has written what it holds
    assert transport.disconnecting and transport.lost == []
    assert transport.producer is None
    peer.close()


def test_keep_alive_request_is_answered_at_once_and_stays_open():
    site, transport, peer = connected(b"GET /master HTTP/1.1\r\nHost: x\r\n\r\n")
    got = read_available(peer)
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\npg-1")
    assert transport.lost == [] and site.connections == 1
    # the next request comes through the transport as usual
    transport.protocol.dataReceived(b"GET /version HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert read_available(peer) == b""
    assert transport.value().endswith(b"\r\n\r\n9.9.9")
    assert transport.disconnecting
    peer.close()


def test_a_later_answer_with_close_is_queued_with_the_close():
    """
    A ``min_lsn`` wait answers later: the keep-alive answer before it went
    to the socket, the closing one goes with the close, in order.
    """
    later = Deferred()

    def answer(real):
        return lambda route, query, as_json: later if route == "master" else real(
            route, query, as_json)

    site, transport, peer = connected(
        b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n", answer=answer)
    assert read_available(peer).endswith(b"\r\n\r\n9.9.9")
    assert transport.value() == b"" and not transport.disconnecting
    later.callback(text("pg-2"))
    assert read_available(peer) == b""
    got = transport.value()
    assert got.startswith(b"HTTP/1.1 200 OK\r\nConnection: close\r\n")
    assert got.endswith(b"\r\n\r\npg-2")
    assert transport.disconnecting and transport.producer is None
    peer.close()


@pytest.mark.parametrize("request_", [
    b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n",
    b"GET /master HTTP/1.1\r\nHost: x\r\n\r\n",
], ids=["close-answer", "idle"])
def test_a_closing_connection_whose_client_does_not_read_is_aborted(request_):
    """
    Closing waits for the transport to send what it holds; a client that
    never reads holds that up, so after ``idle_timeout`` more the connection
    is aborted (here the test's transport never sends: the unread client).
    """
    site, transport, peer = connected(request_, idle_timeout=5.0)
    clock = site.clock
    if not transport.disconnecting:
        # the keep-alive connection: closed once idle
        clock.pump([1.0] * 7)
        assert transport.disconnecting
    clock.pump([1.0] * 4)
    assert not transport.disconnected
    clock.pump([1.0] * 3)
    assert transport.disconnected  # aborted
    peer.close()


def test_nothing_arrived_yet_nothing_happens():
    site, transport, peer = connected(b"")
    assert read_available(peer) == b""
    assert transport.lost == [] and site.connections == 1
    peer.close()


def test_a_transport_that_is_not_a_file_descriptor_is_not_read_at_once():
    site, transport, peer = connected(b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n",
                                      provides_descriptor=False)
    assert read_available(peer) == b""
    assert transport.value() == b"" and site.connections == 1
    # the request is still there for the transport to read
    assert transport.sock.recv(4096).startswith(b"GET /master ")
    peer.close()
    transport.sock.close()


@implementer(ITCPTransport)
class _PlainTransport(StringTransport):
    """
    An ITCPTransport with a socket handle that is not a file descriptor
    of the reactor's (the shortcut must leave it to the transport).
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock

    def getHandle(self) -> socket.socket:
        return self.sock


def _exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.fixture
def listening(reactor):
    """
    Listen for the API on a real endpoint; stopped afterwards.
    """
    ports = []

    def listen(make_endpoint):
        v = view()
        site = make_site(make_api(lambda: v, CONFIG, "9.9.9"), reactor)
        # these endpoints listen at once: the Deferred has fired
        got: list = []
        make_endpoint().listen(site).addBoth(got.append)
        port = got[0]
        ports.append(port)
        return site, port.getHost().port

    yield listen
    for p in ports:
        pytest_twisted.blockon(p.stopListening())


@pytest_twisted.inlineCallbacks
def test_deferred_accept_listener_answers_and_closes_in_order(reactor, listening):
    """
    On the default listener (TCP_DEFER_ACCEPT, the request read as the
    connection is made) pipelined requests in the first segment are all
    answered, the last asks to close: the client reads every answer and
    then the end of the stream, and the connection is gone.
    """
    from twisted.internet import threads

    from pgstatus.listening import deferred_accept_candidates

    site, port = listening(deferred_accept_candidates(reactor, "127.0.0.1", 0, 10)[0][1])
    got = yield threads.deferToThread(
        _exchange, port, b"GET /master HTTP/1.1\r\n\r\nGET /version HTTP/1.1\r\n\r\n"
                         b"GET /live HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert got.count(b"HTTP/1.1 200 OK\r\n") == 3
    assert got.endswith(b"\r\n\r\nOK") or got.endswith(b"\r\n\r\n")
    for _ in range(200):
        if site.connections == 0:
            break
        yield task.deferLater(reactor, 0.01, lambda: None)
    assert site.connections == 0 and site.open_connections() == []


@pytest_twisted.inlineCallbacks
def test_haproxy_listener_reads_the_proxy_header_first(reactor, listening):
    """
    A ``haproxy:`` endpoint wraps the transport; the PROXY header sent in
    the same segment as the request is the wrapper's to read, so the
    shortcut must not read the socket itself (it answered 400 when it did).
    """
    from twisted.internet import threads
    from pgstatus.listening import description_endpoint

    site, port = listening(lambda: description_endpoint(reactor, "haproxy:tcp:0:interface=127.0.0.1"))
    got = yield threads.deferToThread(
        _exchange, port, b"PROXY TCP4 10.1.2.3 127.0.0.1 40000 8000\r\n"
                         b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\npg-1")
