"""
The HTTP listener's TCP port and connection transport: Twisted's own
(:class:`twisted.internet.tcp.Port` and ``tcp.Server``) with work a
connection that lives for one request does not need left out.

A client that opens a connection per request (health checkers often do)
pays for the connection's setup and teardown every time.  Profiled under
``wrk -H 'Connection: close'``, Twisted spends on each connection, besides
the system calls the kernel needs:

- in ``socket.accept()``, converting the listening socket's family and
  type to enums, twice per accepted socket;
- in ``tcp.Server.__init__``, two strings for logs and ``repr`` (the
  protocol's log prefix is looked up by reflection);
- a ``setsockopt(TCP_NODELAY)`` per connection, although Linux gives an
  accepted socket the listening socket's ``TCP_NODELAY``;
- when closing, a ``Failure.check`` to decide between an orderly and an
  aborted close.

:class:`Port` and :class:`Connection` leave those out and change nothing
else: accepting (with Twisted's handling of a full file descriptor table),
reading, writing, producers, ``loseConnection`` and ``abortConnection`` are
Twisted's.
"""

from __future__ import annotations

import _socket
import socket
import sys
from typing import Any

from twisted.internet import tcp
from twisted.internet.abstract import FileDescriptor
from twisted.internet.address import IPv6Address
from twisted.internet.error import ConnectionAborted

#: the family and type as the C socket object has them: ints, no enum
_native_family = _socket.socket.family
_native_type = _socket.socket.type

#: whether accepted sockets inherit TCP_NODELAY from the listening socket
#: (Linux does; elsewhere each connection sets it)
NODELAY_INHERITED = sys.platform.startswith("linux")


class _ListeningSocket(socket.socket):
    """
    The listening socket: ``accept()`` as ``socket.socket``'s, without
    converting the family and type to enums for each accepted socket.
    """

    __slots__ = ()

    def accept(self) -> tuple[socket.socket, Any]:
        fd, addr = self._accept()  # type: ignore[attr-defined]
        sock = socket.socket(_native_family.__get__(self), _native_type.__get__(self), 0, fd)
        return sock, addr


class Connection(tcp.Server):
    """
    A connection accepted by :class:`Port`: ``tcp.Server`` without the
    per-connection log strings (the log prefix is the protocol's class
    name, and ``repr`` is made when asked for), whose close decides orderly or aborted without a
    ``Failure.check``.
    """

    def __init__(self, sock: socket.socket, protocol: Any, client: tuple[Any, ...],
                 server: Any, sessionno: int, reactor: Any) -> None:
        # tcp.Server.__init__ less its log strings
        tcp.Connection.__init__(self, sock, protocol, reactor)
        if len(client) != 2:
            self._addressType = IPv6Address
        self.server = server
        self.client = client
        self.sessionno = sessionno
        self.hostname = client[0]
        #: the log prefix: the protocol's class name (tcp.Server formats
        #: "<class>,<session>,<peer>" for every connection)
        self.logstr = protocol.__class__.__name__
        self.startReading()
        self.connected = 1

    def __repr__(self) -> str:
        port = getattr(self.server, "_realPortNumber", None)
        return f"<{self.logstr} #{self.sessionno} on {port}>"

    def connectionLost(self, reason: Any) -> None:
        # tcp.Connection.connectionLost, with an isinstance for its check
        if "socket" not in self.__dict__:
            return
        FileDescriptor.connectionLost(self, reason)
        self._closeSocket(not isinstance(reason.value, ConnectionAborted))
        protocol = self.protocol
        del self.protocol
        del self.socket
        del self.fileno
        protocol.connectionLost(reason)


class Port(tcp.Port):
    """
    A listening port whose connections are :class:`Connection` and inherit
    ``TCP_NODELAY`` (set on the listening socket).
    """

    transport = Connection

    def createInternetSocket(self) -> socket.socket:
        s = super().createInternetSocket()
        listening = _ListeningSocket(s.family, s.type, s.proto, s.detach())
        listening.setblocking(False)
        if NODELAY_INHERITED:
            listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return listening


#: transports whose socket the fast path may write to directly
DIRECT = (tcp.Server, Connection)


def listen_tcp(reactor: Any, port: int, factory: Any, interface: str = "",
               backlog: int = 50) -> Port:
    """
    Listen as ``reactor.listenTCP`` does, with :class:`Port`.
    """
    p = Port(port, factory, backlog, interface, reactor)
    p.startListening()
    return p
