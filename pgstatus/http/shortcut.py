"""
A shortcut in front of twisted.web: a cache of the answer function, not a
second server.

Each connection starts with a
:class:`~pgstatus.http.connection.ShortcutProtocol`.  For a request head
that :func:`~pgstatus.http.head.parse_head` takes (a whitelist of RFC 9112
syntax, for the routes the route table answers from the view), it calls the
same answer function the Klein application calls and sends the bytes
twisted.web would send for that answer (:mod:`pgstatus.http.replay`).  At
the first byte it does not fully understand, the connection, with every
byte not yet answered, goes to an ordinary twisted.web channel of the
:class:`~twisted.web.server.Site` serving the Klein resource
(:class:`QuietSite`), and stays there.  A differential test holds both
paths to the same bytes.

This module holds the factory (:class:`ShortcutSite`: limits, deadlines'
sweep, memos shared by the connections) and the twisted.web site.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocolNegotiationFactory, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.web.server import Site
from zope.interface import implementer

from pgstatus.http.answer import Response
from pgstatus.http.connection import ShortcutProtocol
from pgstatus.http.head import HeadMemo
from pgstatus.http.replay import DateLine, Replay

#: ``(route, query, as_json) -> Response | Deferred[Response]``
AnswerFunction = Callable[[str, bytes, bool], "Response | Deferred[Response]"]

BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
        b"Connection: close\r\n\r\n")


@implementer(IProtocolNegotiationFactory)
class ShortcutSite(Factory):
    """
    Builds a :class:`ShortcutProtocol` per connection.

    :param web: the twisted.web site connections are handed to.
    :param answer: the answer function.
    :param count: ``(route, status)``: counts an answered request.
    :param clock: for ``Date`` and the deadlines.
    :param enabled: take heads at all (off: every connection goes to
        twisted.web at once; the differential tests' reference).
    :param max_connections: open connections; one more is answered 503.
    :param idle_timeout: seconds a connection may sit idle before any
        request is handed to twisted.web (whose own idle timeout applies
        after).
    :param header_timeout: seconds a request head may take to arrive, on
        both paths.
    """

    noisy = False

    def __init__(self, web: Site, answer: AnswerFunction, count: Callable[[str, int], None],
                 clock: Any, *, enabled: bool = True, max_connections: int = 10000,
                 idle_timeout: float = 60.0, header_timeout: float = 10.0) -> None:
        self.web = web
        self.answer = answer
        self.count = count
        self.clock = clock
        self.enabled = enabled
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.heads = HeadMemo()
        self.replay = Replay()
        self.date = DateLine(clock)
        self.connections = 0
        self.refused = 0
        #: open connections (a dict as an ordered set), for the sweep
        self._open: dict[ShortcutProtocol, None] = {}
        self._sweep_period = max(0.05, min(idle_timeout, header_timeout) / 4)
        self._sweep_call: Any = None

    def buildProtocol(self, addr: Any) -> Protocol:
        """
        A shortcut protocol, or past ``max_connections`` one that answers
        503 and closes.
        """
        if self.connections >= self.max_connections:
            self.refused += 1
            return _Busy()
        p = ShortcutProtocol(self, addr)
        return p

    def acceptableProtocols(self) -> list[bytes]:
        """
        TLS (ALPN): HTTP/1.1 only, which both paths speak.
        """
        return [b"http/1.1"]

    def view_changed(self) -> None:
        """
        Forget memoised answer bytes (the monitor published a new view).
        """
        self.replay.reset()

    def track(self, p: ShortcutProtocol) -> None:
        self._open[p] = None
        if self._sweep_call is None:
            self._sweep_call = self.clock.callLater(self._sweep_period, self._sweep)

    def untrack(self, p: ShortcutProtocol) -> None:
        self._open.pop(p, None)

    def open_connections(self) -> list[ShortcutProtocol]:
        """
        The connections open now (for tests and measurements).
        """
        return list(self._open)

    def _sweep(self) -> None:
        """
        Close connections whose request head is overdue or that sat idle
        too long; runs while connections are open.
        """
        self._sweep_call = None
        now = self.clock.seconds()
        for p in list(self._open):
            p.check_deadlines(now)
        if self._open:
            self._sweep_call = self.clock.callLater(self._sweep_period, self._sweep)

    def stopFactory(self) -> None:
        """
        Stop the sweep when the server stops listening.
        """
        if self._sweep_call is not None and self._sweep_call.active():
            self._sweep_call.cancel()
        self._sweep_call = None


class _Busy(Protocol):
    """
    Refuses a connection over the limit politely.
    """

    transport: ITransport  # set (never None) before connectionMade

    def connectionMade(self) -> None:
        self.transport.write(BUSY)
        self.transport.loseConnection()


class QuietSite(Site):
    """
    The twisted.web site behind the shortcut: no access log (the API is
    called on every application request).

    :param idle_timeout: seconds after which an idle connection is closed.
    """

    noisy = False

    def __init__(self, resource: Any, reactor: Any, idle_timeout: float) -> None:
        super().__init__(resource, reactor=reactor, timeout=idle_timeout)

    def log(self, request: Any) -> None:
        """
        No access log.
        """
