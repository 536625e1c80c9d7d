"""
The HAProxy agent check: a TCP port speaking HAProxy's agent protocol, so
that one pg-status instance steers every server of HAProxy's write and read
backends (``pg_status__agent_port``, off by default).

HAProxy opens one connection per check, sends its ``agent-send`` string and
reads one line back.  The request names a configured host and the role the
backend wants from it::

    <host> master
    <host> replica [<lag_ms> [<lag_bytes>]]

``<host>`` is an entry of ``pg_status__hosts`` as written there (as for
``/status?host=``); the role is ``master`` or ``replica`` in any case; a
limit is a non-negative integer, or ``-`` for none; an omitted limit is no
limit (as for ``/replica``).

The answer is one line made of HAProxy agent words, with a description after
``#`` that HAProxy shows as ``last_agt`` in ``show stat`` and in its logs:

==========  ==================  ==========================================
decision    line                when
==========  ==================  ==========================================
up          ``up``              ``master``: the host is the selected master;
                                ``replica``: an alive replica (possibly
                                dead included) within every given limit.
                                ``ready`` is added when the request has a
                                limit, to undo an earlier ``drain``.
drain       ``up drain``        ``replica``: an alive replica beyond a
                                limit; an unknown lag meets no limit.
down        ``down``            the host is dead, has the other role, is a
                                master that is not the selected one (split
                                brain), is not configured, the request is
                                malformed or too long, or none came.
no change   (words omitted)     pg-status is not ready yet (or the host was
                                never checked): HAProxy keeps its state.
==========  ==================  ==========================================

``maint`` is never answered: it is the operator's.  Since ``ready`` also
clears a ``drain`` or ``maint`` set by an operator, HAProxy's agent check of
such a server should be stopped first (``disable agent <backend>/<server>``).

A request ends at a line feed, when HAProxy shuts down its side of the
connection, or after :data:`REQUEST_TIMEOUT` seconds; what came by then is
the request, so nothing at all (no ``agent-send``) is answered ``down``.  A
line longer than :data:`MAX_LINE` bytes is answered ``down`` at once.  After
the answer the connection is closed; anything else the client sends is
ignored.  Everything runs on the reactor from the current
:class:`~pgstatus.model.status.View`; nothing blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHalfCloseableProtocol, ITCPTransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from zope.interface import implementer

from pgstatus.agent_answer import MAX_LINE, answer_line
from pgstatus.listening import ListenerService, tcp_candidates
from pgstatus.model.status import View

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_LINE",
    "REQUEST_TIMEOUT",
    "AgentFactory",
    "AgentProtocol",
    "AgentService",
]

log = Logger(namespace="pgstatus.agent")

#: seconds to wait for the request line (and, after the answer, for the
#: client to take it) before the connection is cut
REQUEST_TIMEOUT = 1.0
#: open agent connections beyond which new ones are closed unanswered
MAX_CONNECTIONS = 1000

@implementer(IHalfCloseableProtocol)
class AgentProtocol(Protocol):
    """
    One agent connection: read a request line, answer it, close.
    """

    factory: AgentFactory
    transport: ITCPTransport  # set (a tcp.Server) before connectionMade
    _buf = b""
    _answered = False
    _timer: Any = None

    def connectionMade(self) -> None:
        self.factory.connections += 1
        self.factory.open.add(self)
        self._timer = self.factory.reactor.callLater(REQUEST_TIMEOUT, self._timed_out)

    def dataReceived(self, data: bytes) -> None:
        if self._answered:
            return
        buf = self._buf + data if self._buf else data
        end = buf.find(b"\n", 0, MAX_LINE + 2)
        if end >= 0:
            line = buf[:end]
            if line.endswith(b"\r"):
                line = line[:-1]
            self._answer(line)
        elif len(buf) > MAX_LINE + 1:
            self._answer(buf)  # refused as too long
        else:
            self._buf = buf

    def readConnectionLost(self) -> None:
        """
        The client shut down its side: what it sent is the request.
        """
        if not self._answered:
            self._answer(self._buf or None)

    def writeConnectionLost(self) -> None:
        """
        Nothing more can be written; the answer went out or never will.
        """
        self.transport.loseConnection()

    def _timed_out(self) -> None:
        self._timer = None
        if self._answered:
            self.transport.abortConnection()
        else:
            self._answer(self._buf or None)

    def _answer(self, line: bytes | None) -> None:
        self._answered = True
        self._buf = b""
        answer, request = answer_line(self.factory.current(), line)
        if request is None:
            log.debug("agent request refused reason={reason}", reason=answer.reason)
        self.transport.write(answer.line())
        self.transport.loseConnection()
        if self._timer is not None and self._timer.active():
            self._timer.reset(REQUEST_TIMEOUT)
        else:
            self._timer = self.factory.reactor.callLater(REQUEST_TIMEOUT, self._timed_out)

    def connectionLost(self, reason: Any = None) -> None:
        self.factory.connections -= 1
        self.factory.open.discard(self)
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None


if TYPE_CHECKING:
    # subscripted for mypy only: Factory is not generic in every Twisted
    # setup.py allows
    _AgentFactoryBase = Factory[AgentProtocol]
else:
    _AgentFactoryBase = Factory


class AgentFactory(_AgentFactoryBase):
    """
    Builds :class:`AgentProtocol`; closes connections beyond
    :data:`MAX_CONNECTIONS` at once.

    :param current: returns the monitor's current :class:`View`.
    :param reactor: for timeouts.
    """

    protocol = AgentProtocol
    noisy = False

    def __init__(self, current: Callable[[], View], reactor: Any,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.current = current
        self.reactor = reactor
        self.max_connections = max_connections
        self.connections = 0
        self.refused = 0
        #: the open connections, cut when the service stops
        self.open: set[AgentProtocol] = set()

    def buildProtocol(self, addr: Any) -> AgentProtocol | None:
        if self.connections >= self.max_connections:
            self.refused += 1
            return None
        return super().buildProtocol(addr)


class AgentService(ListenerService):
    """
    Listens for HAProxy agent checks on ``address`` (as the HTTP listener:
    ``*`` is ``::``, else ``0.0.0.0``).

    :param port: the TCP port; 0 picks a free one (for tests; the setting's
        0 means no agent at all and this service is not created).
    :param max_connections: open agent connections at most (the service
        lowers :data:`MAX_CONNECTIONS` to fit the open-files limit, see
        :mod:`pgstatus.fdlimit`); ``None``: :data:`MAX_CONNECTIONS`.
    :ivar port: the listening port once started.
    """

    name = "agent"

    def __init__(self, reactor: Any, address: str, port: int,
                 current: Callable[[], View], max_connections: int | None = None) -> None:
        self.factory = AgentFactory(current, reactor, MAX_CONNECTIONS if max_connections is None
                                    else max_connections)
        super().__init__(tcp_candidates(reactor, address, port), self.factory, log, "agent",
                         (address, port))

    def stopService(self) -> Deferred[None] | None:
        """
        Stop listening and cut the open agent connections.
        """
        for p in list(self.factory.open):
            p.transport.abortConnection()
        return super().stopService()
