"""
The shortcut reads what arrived with a connection as the connection is made
(with ``TCP_DEFER_ACCEPT`` the request is there already) and closes a
connection whose answers all went straight to the socket at once, through
the transport's ``connectionLost``, not a reactor turn later.  Driven with a
transport over one end of a real socket pair, so that "at once" means
"before ``makeConnection`` returns".
"""

from __future__ import annotations

import socket

from http_apis import make_api, make_site
from test_shortcut import CONFIG, view
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IReadWriteDescriptor, ITCPTransport
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface import implementer


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


def connected(request: bytes, provides_descriptor: bool = True):
    """
    A shortcut connection over a socket pair whose peer sent ``request``
    before the connection was made; returns (site, transport, peer).
    """
    server, peer = socket.socketpair()
    server.setblocking(False)
    peer.settimeout(5)
    if request:
        peer.sendall(request)
    clock = Clock()
    v = view()
    site = make_site(make_api(lambda: v, CONFIG, "9.9.9"), clock)
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


def test_request_with_close_is_answered_and_closed_before_make_connection_returns():
    site, transport, peer = connected(b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n")
    got = read_available(peer)
    assert got.startswith(b"HTTP/1.1 200 OK\r\nConnection: close\r\n")
    assert got.endswith(b"\r\n\r\npg-1<EOF>")
    assert [r.type for r in transport.lost] == [ConnectionDone]
    assert site.connections == 0 and site.open_connections() == []
    assert transport.value() == b"" and transport.producer is None


def test_keep_alive_request_is_answered_at_once_and_stays_open():
    site, transport, peer = connected(b"GET /master HTTP/1.1\r\nHost: x\r\n\r\n")
    got = read_available(peer)
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\npg-1")
    assert transport.lost == [] and site.connections == 1
    # the next request comes through the transport as usual
    transport.protocol.dataReceived(b"GET /version HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert read_available(peer).endswith(b"\r\n\r\n9.9.9<EOF>")
    assert site.connections == 0


def test_nothing_arrived_yet_nothing_happens():
    site, transport, peer = connected(b"")
    assert read_available(peer) == b""
    assert transport.lost == [] and site.connections == 1


def test_a_transport_that_is_not_a_file_descriptor_is_not_read_at_once():
    site, transport, peer = connected(b"GET /master HTTP/1.1\r\nConnection: close\r\n\r\n",
                                      provides_descriptor=False)
    assert read_available(peer) == b""
    assert transport.value() == b"" and site.connections == 1


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
