"""
The HTTP server in front of the Klein application: the factory that builds
a :class:`~pgstatus.http.front.Front` per connection (the connection cap,
the deadlines' sweep, the answer cache they share, the rate-limited line
about client bytes twisted.web choked on), and the twisted.web site the
fronts hand requests to, which reports each request it is about to render
to its connection's front.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IProtocolNegotiationFactory, ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.web.server import Request, Site
from zope.interface import directlyProvides, implementer, providedBy

from pgstatus.http.cache import AnswerCache
from pgstatus.http.front import Front
from pgstatus.logging.throttle import Throttle

log = Logger(namespace="pgstatus.http")

BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
        b"Connection: close\r\n\r\n")
#: seconds between two log lines about client bytes twisted.web choked on
FAULT_LOG_INTERVAL = 10.0

@implementer(IProtocolNegotiationFactory)
class FrontFactory(Factory):
    """
    Builds a :class:`Front` per connection; keeps what they share.

    :param web: the twisted.web site connections are handed to.
    :param max_connections: open connections; one more is answered 503.
    :param idle_timeout: seconds a connection may sit idle before a
        hand-over, or closing with an answer its client does not read.
    :param header_timeout: seconds a request head may take to arrive.
    """

    noisy = False

    def __init__(self, web: Site, cache: AnswerCache, clock: Any, *,
                 max_connections: int = 10000, idle_timeout: float = 60.0,
                 header_timeout: float = 10.0) -> None:
        self.web = web
        self.cache = cache
        self.clock = clock
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.connections = 0
        self.refused = 0
        #: open connections (a dict as an ordered set), for the sweep
        self._open: dict[Front, None] = {}
        self._sweep_period = max(0.05, min(idle_timeout, header_timeout) / 4)
        self._sweep_call: Any = None
        self._faults = Throttle(clock, FAULT_LOG_INTERVAL)

    def buildProtocol(self, addr: Any) -> Protocol:
        """
        A front, or past ``max_connections`` a 503 and a close.
        """
        if self.connections >= self.max_connections:
            self.refused += 1
            return _Busy()
        return Front(self, addr)

    def connect_channel(self, front: Front) -> Any:
        """
        A twisted.web channel of :attr:`web` for ``front``'s connection.
        """
        channel = self.web.buildProtocol(front.addr)
        channel.makeConnection(ChannelTransport(front))
        return channel

    def acceptableProtocols(self) -> list[bytes]:
        """
        TLS (ALPN): HTTP/1.1 only.
        """
        return [b"http/1.1"]

    def view_changed(self) -> None:
        self.cache.view_changed()

    def track(self, p: Front) -> None:
        self._open[p] = None
        if self._sweep_call is None:
            self._sweep_call = self.clock.callLater(self._sweep_period, self._sweep)

    def untrack(self, p: Front) -> None:
        self._open.pop(p, None)

    def open_connections(self) -> list[Front]:
        return list(self._open)

    def fault(self, what: str) -> None:
        """
        A WARNING (one per :data:`FAULT_LOG_INTERVAL` at most) about client
        bytes twisted.web choked on.
        """
        count = self._faults.due()
        if count:
            log.warn("bad request refused error={error} count={count}", error=what[:200],
                     count=count)

    def _sweep(self) -> None:
        self._sweep_call = None
        now = self.clock.seconds()
        for p in list(self._open):
            p.check_deadlines(now)
        if self._open:
            self._sweep_call = self.clock.callLater(self._sweep_period, self._sweep)

    def stopFactory(self) -> None:
        if self._sweep_call is not None and self._sweep_call.active():
            self._sweep_call.cancel()
        self._sweep_call = None


class _Busy(Protocol):
    transport: ITransport

    def connectionMade(self) -> None:
        self.transport.write(BUSY)
        self.transport.loseConnection()


class ReportingRequest(Request):
    """
    twisted.web's request, reporting itself to its connection's front when
    it is whole and about to be processed: every request, ``*`` ones
    (answered by twisted.web itself) included.
    """

    def process(self) -> None:
        transport = getattr(self.channel, "transport", None)
        if isinstance(transport, ChannelTransport):
            transport.front.received(self)
        super().process()


class QuietSite(Site):
    """
    The twisted.web site behind the fronts: no access log (the API is called
    on every application request), no parsing of form bodies (no route
    takes one), each request reported to its connection's front.
    """

    noisy = False

    def __init__(self, resource: Any, reactor: Any, idle_timeout: float) -> None:
        super().__init__(resource, requestFactory=ReportingRequest, reactor=reactor,
                         timeout=idle_timeout, parsePOSTFormSubmission=False)

    def log(self, request: Any) -> None:
        pass


class ChannelTransport:
    """
    A channel's transport: the connection's (whose interfaces it provides,
    as a protocol wrapper does), but the front stays the producer and
    decides what the channel reads.
    """

    def __init__(self, front: Front) -> None:
        self.front = front
        self._transport = front.transport
        directlyProvides(self, providedBy(self._transport))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        self._transport.write(data)

    def writeSequence(self, data: Any) -> None:
        self._transport.writeSequence(data)

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self.front.inner = producer

    def unregisterProducer(self) -> None:
        self.front.inner = None

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def loseConnection(self) -> None:
        self.front.channel_closing()
        self._transport.loseConnection()
