"""
A fast path in front of the Klein application.

:class:`FastChannel` is a plain protocol that answers a complete,
well-formed ``GET`` or ``HEAD`` request over HTTP/1.1 for one of the API's
own routes straight from :class:`~pgstatus.http.responses.Renderer`, with the
bytes Klein would have sent (status, headers, body).  Anything else, and
everything after it on the same connection, is handed to an ordinary
``twisted.web`` channel and so to Klein, which stays the single definition of
the API.  Tests compare both byte for byte.

What keeps the answer cheap:

- Request heads seen before are memoised with what they ask (per view):
  a repeated request is one dictionary lookup.
- Answers go straight to the socket when the transport has nothing queued
  (see :meth:`FastChannel._send`), instead of waiting for the next reactor
  iteration.
- No timer per connection: one sweep per site enforces the idle and
  request-head deadlines.
- ``twisted.web.server`` and Klein (several MiB) are imported only when a
  request needs them (:meth:`FastSite.web`): a sidecar asked only the
  API's routes never loads them.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import ITransport
from twisted.internet.protocol import Factory, Protocol

from pgstatus.http.channel import FastChannel
from pgstatus.http.responses import Renderer
from pgstatus.http.wire import DateLine, Wire


class FastSite(Factory):
    """
    The HTTP server factory: channels answer the API's routes directly and
    hand everything else to a ``twisted.web`` site serving ``resource``.

    :param resource: the Klein resource, for everything else, or a callable
        returning it (called at first use, so Klein is imported then).
    :param renderer: what the API answers.
    :param reactor: the clock for the ``Date`` header and the deadlines.
    :param fast: enable the shortcut (off: plain ``twisted.web``).
    :param max_connections: open connections; one more is answered 503.
    :param idle_timeout: seconds after which an idle connection is closed.
    :param header_timeout: seconds a request head may take to arrive.
    """

    noisy = False

    def __init__(self, resource: Any, renderer: Renderer, reactor: Any,
                 fast: bool = True, max_connections: int = 10000,
                 idle_timeout: float = 60.0, header_timeout: float = 10.0) -> None:
        self.reactor = reactor
        self.seconds = reactor.seconds
        self._resource = resource
        self.renderer = renderer
        self.wire = Wire()
        self.date = DateLine(reactor)
        self.fast = fast
        self.max_connections = max_connections
        self.timeout = idle_timeout
        self.header_timeout = header_timeout
        self.connections = 0
        self.refused = 0
        self._web: Any = None
        #: open fast channels (a dict as an ordered set), for the sweep
        self._channels: dict[FastChannel, None] = {}
        self._sweep_period = max(0.05, min(idle_timeout, header_timeout) / 4)
        self._sweep_call: Any = None

    def buildProtocol(self, addr: Any) -> Protocol:
        """
        A channel, or, past ``max_connections``, a protocol that answers
        503 and closes.
        """
        if self.connections >= self.max_connections:
            self.refused += 1
            return _Busy()
        p = FastChannel()
        p.site = self
        return p

    def web(self) -> Any:
        """
        The ``twisted.web`` site for what the fast path does not answer,
        built at first use.
        """
        if self._web is None:
            from pgstatus.http.slowpath import WebSite

            resource = self._resource
            if callable(resource) and not hasattr(resource, "getChildWithDefault"):
                resource = resource()
            self._web = WebSite(resource, self.reactor, self.timeout)
        return self._web

    def _track(self, channel: FastChannel) -> None:
        self._channels[channel] = None
        if self._sweep_call is None:
            self._sweep_call = self.reactor.callLater(self._sweep_period, self._sweep)

    def _sweep(self) -> None:
        """
        Close connections whose request head is overdue or that were idle
        too long; runs while connections are open.
        """
        self._sweep_call = None
        now = self.seconds()
        for channel in list(self._channels):
            channel.check_deadlines(now)
        if self._channels:
            self._sweep_call = self.reactor.callLater(self._sweep_period, self._sweep)

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
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n")
        self.transport.loseConnection()

