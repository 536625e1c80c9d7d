"""
The HTTP port's accept path, lean for clients that open a connection per
request (health checks, scripts, some pools).

Twisted's ``tcp.Port.doRead`` builds, at every call, a log-buffering context
(an attrs object and a ``Logger``) and a generator, and, per connection, an
``IPv4Address`` for the factory; ``tcp.Server`` closes with ``shutdown()``
before ``close()`` (which its own comment calls unnecessary: sockets are
close-on-exec).  :class:`LeanPort` accepts in a plain loop, passes the
factory the peer's ``(host, port)`` tuple (the fast path's site ignores it;
the transport keeps it for ``getPeer``), and its transports close with
``close()`` alone.  Accept errors are handled as Twisted handles them:
``EMFILE`` by Twisted's own loop (which frees a reserved descriptor to
accept and close what waits), ``ECONNABORTED``, ``ENOBUFS``, ``ENFILE``,
``ENOMEM`` logged with Twisted's line, ending the round, ``EPERM`` skipped.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from twisted.internet import tcp
from twisted.logger import Logger

log = Logger(namespace="pgstatus.http")

#: accept errors that end this round of accepting (as in Twisted, which logs
#: them with the same line)
_TRANSIENT = (errno.ENOBUFS, errno.ENFILE, errno.ENOMEM, errno.ECONNABORTED)


class LeanServer(tcp.Server):
    """
    A server-side TCP transport that closes without ``shutdown()`` first.
    """

    _shouldShutdown = False


class LeanPort(tcp.Port):
    """
    A listening TCP port with a lean accept loop; its factory's
    ``buildProtocol`` gets the peer's address as a tuple.
    """

    transport = LeanServer

    def doRead(self) -> None:
        sock = self.socket
        factory = self.factory
        limit = self.numberAccepts
        accepted = 0
        try:
            while accepted < limit and not self.disconnecting:
                try:
                    skt, addr = sock.accept()
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.EPERM:  # a firewall's refusal: the next one
                        continue
                    if e.errno == errno.EMFILE:
                        # out of descriptors: Twisted's loop frees its reserved
                        # one to accept and close what waits
                        self.numberAccepts = max(1, accepted)
                        super().doRead()
                        return
                    if e.errno in _TRANSIENT:
                        log.info("Could not accept new connection ({acceptError})",
                                 acceptError=errno.errorcode[e.errno])
                        break
                    raise
                accepted += 1
                if len(addr) == 4:  # IPv6: with the scope id, as Twisted does
                    host = socket.getnameinfo(addr, socket.NI_NUMERICHOST | socket.NI_NUMERICSERV)
                    addr = (host[0], *addr[1:])
                protocol = factory.buildProtocol(addr)
                if protocol is None:
                    skt.close()
                    continue
                session = self.sessionno
                self.sessionno = session + 1
                protocol.makeConnection(self.transport(skt, protocol, addr, self, session,
                                                       self.reactor))
        except BaseException:
            log.failure("accepting a connection")
        # as Twisted scales its accept loop to the traffic
        self.numberAccepts = limit + 20 if accepted == limit else max(1, accepted)


def listen_lean(reactor: Any, port: int, factory: Any, interface: str) -> LeanPort:
    """
    ``reactor.listenTCP`` with a :class:`LeanPort`.
    """
    p = LeanPort(port, factory, 50, interface, reactor)
    p.startListening()
    return p
