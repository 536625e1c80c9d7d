"""
The HTTP listener's TCP port and connection transport: Twisted's own
(:class:`twisted.internet.tcp.Port` and ``tcp.Server``), made cheaper for a
connection that lives for one request.

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
- a reactor round before the request is read: registering the socket with
  epoll, waiting for it to be readable, dispatching the event, and
  unregistering it at close;
- when closing, a ``Failure.check`` to decide between an orderly and an
  aborted close.

:class:`Port` and :class:`Connection` leave those out:

- On Linux the listening socket has ``TCP_DEFER_ACCEPT`` (1 s, as HAProxy's
  ``defer-accept`` and nginx's ``deferred``): the kernel hands over a
  connection once its first data has arrived, or, for a client that sends
  nothing, about a second after it connected.  HTTP clients speak first,
  so the request is there when the connection is accepted.
- A protocol with ``reads_first`` (:class:`~pgstatus.http.channel.FastChannel`)
  reads it at once (:meth:`Connection.read_first`); the socket joins epoll
  only if the connection stays open, so a request answered with
  ``Connection: close`` never touches it.

Everything else (accepting, with Twisted's handling of a full file
descriptor table, reading, writing, producers, ``loseConnection`` and
``abortConnection``) is Twisted's.
"""

from __future__ import annotations

import _socket
import socket
import sys
from typing import TYPE_CHECKING, Any, cast

from twisted.internet import tcp
from twisted.internet.abstract import FileDescriptor
from twisted.internet.address import IPv6Address
from twisted.internet.error import ConnectionAborted
from twisted.logger import Logger
from twisted.python.failure import Failure

if TYPE_CHECKING:
    from twisted.internet.posixbase import _DisconnectSelectableMixin

#: the family and type as the C socket object has them: ints, no enum
_native_family = _socket.socket.family
_native_type = _socket.socket.type

#: whether accepted sockets inherit TCP_NODELAY from the listening socket
#: (Linux does; elsewhere each connection sets it)
NODELAY_INHERITED = sys.platform.startswith("linux")
#: seconds the kernel waits for a client's first data before it hands over
#: the connection anyway (TCP_DEFER_ACCEPT, Linux only)
DEFER_ACCEPT = 1

log = Logger(namespace="pgstatus.http")


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
    name, and ``repr`` is made when asked for), which lets a protocol with
    ``reads_first`` read before the socket is registered with the reactor
    (see :meth:`read_first`), and whose close decides orderly or aborted
    without a ``Failure.check``.
    """

    #: the protocol paused reading (``pauseProducing``) and has not resumed
    _paused = False

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
        if not getattr(protocol, "reads_first", False):
            self.startReading()
        self.connected = 1

    def read_first(self) -> None:
        """
        Read what has arrived (the request, with ``TCP_DEFER_ACCEPT``), then
        register with the reactor for more: unless the connection was
        closed, is closing or being aborted meanwhile, or the protocol
        paused reading.  End of file or an error met here is handled as the
        reactor handles one from its own read.  An exception from the
        protocol is logged and closes the connection, as the reactor does
        with one raised from its read.
        """
        try:
            why = self.doRead()
        except Exception:
            log.failure("reading a new connection failed")
            self.connectionLost(Failure())
            return
        if why is not None:
            # end of file or an error at once (a probe that connects and
            # closes): as the reactor handles one from its own read, a
            # half-close included (the reactors that run selectables have
            # _disconnectSelectable, which IReactorFDSet does not declare)
            reactor = cast("_DisconnectSelectableMixin", self.reactor)
            reactor._disconnectSelectable(self, why, True)
        elif (self.connected and not self.disconnecting and not self._aborting
              and not self._paused):
            self.startReading()

    def pauseProducing(self) -> None:
        self._paused = True
        FileDescriptor.pauseProducing(self)

    def resumeProducing(self) -> None:
        self._paused = False
        FileDescriptor.resumeProducing(self)

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
    A listening port whose connections are :class:`Connection`, inherit
    ``TCP_NODELAY`` from the listening socket and, on Linux, arrive with
    their first data (``TCP_DEFER_ACCEPT``).
    """

    transport = Connection

    def createInternetSocket(self) -> socket.socket:
        s = super().createInternetSocket()
        listening = _ListeningSocket(s.family, s.type, s.proto, s.detach())
        try:
            listening.setblocking(False)
            if NODELAY_INHERITED:
                listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            listening.close()
            raise
        if hasattr(socket, "TCP_DEFER_ACCEPT"):
            try:
                listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, DEFER_ACCEPT)
            except OSError:  # pragma: no cover - a sandbox refusing it: accept as usual
                pass
        return listening


#: transports whose socket the fast path may write to directly
DIRECT = (tcp.Server, Connection)


#: the listen backlog (Twisted's default is 50): it also bounds the
#: handshakes the kernel holds back while it waits for their first data
BACKLOG = 511


def listen_tcp(reactor: Any, port: int, factory: Any, interface: str = "",
               backlog: int = BACKLOG) -> Port:
    """
    Listen as ``reactor.listenTCP`` does, with :class:`Port`.
    """
    p = Port(port, factory, backlog, interface, reactor)
    p.startListening()
    return p
