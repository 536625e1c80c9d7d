"""
One TCP connection attempt, before libpq's: a check takes its connection turn
only once TCP reaches the host (see :mod:`pgstatus.monitor.turns`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConnector, ITCPTransport
from twisted.internet.protocol import ClientFactory, Protocol
from twisted.python.failure import Failure


class _Connected(Protocol):
    factory: TCPAttempt
    transport: ITCPTransport  # set (a tcp.Client) before connectionMade

    def connectionMade(self) -> None:
        self.factory.made(self)


if TYPE_CHECKING:
    # subscripted for mypy only: ClientFactory is not generic in every
    # Twisted setup.py allows (24.3's is not)
    _AttemptFactory = ClientFactory[_Connected]
else:
    _AttemptFactory = ClientFactory


class TCPAttempt(_AttemptFactory):
    """
    One TCP connection attempt: the Deferred :meth:`start` returns fires
    with the protocol once TCP connects, or fails with the reason.
    Cancelling it stops connecting.  (``reactor.connectTCP`` rather than an
    endpoint, so that the start does not import
    ``twisted.internet.endpoints`` for it.)

    Once the attempt is over it lets go of its Deferred and connector, so
    that nothing is left in reference cycles (the attempt and its
    connector, the Deferred and its canceller) for the garbage collector:
    with many refused hosts, a check is an attempt, a thousand a second.
    """

    noisy = False
    protocol = _Connected

    def __init__(self) -> None:
        self._connected: Deferred[_Connected] | None = None
        self._connector: IConnector | None = None

    def start(self, reactor: Any, address: str, port: int) -> Deferred[_Connected]:
        """
        Start connecting (once).
        """
        d: Deferred[_Connected] = Deferred(self._cancel)
        self._connected = d
        self._connector = reactor.connectTCP(address, port, self, timeout=3600)
        return d

    def made(self, proto: _Connected) -> None:
        d = self._over()
        if d is not None:
            d.callback(proto)
        else:  # cancelled just as it connected
            proto.transport.abortConnection()

    def clientConnectionFailed(self, connector: IConnector, reason: Failure) -> None:
        d = self._over()
        if d is not None:
            d.errback(reason)

    def _over(self) -> Deferred[_Connected] | None:
        """
        End the attempt: the Deferred to fire, unless it has fired.
        """
        d, self._connected, self._connector = self._connected, None, None
        return None if d is None or d.called else d

    def _cancel(self, d: Deferred[_Connected]) -> None:
        if self._connector is not None:
            self._connector.stopConnecting()


def connect_tcp(reactor: Any, address: str, port: int) -> Deferred[_Connected]:
    """
    Connect TCP to ``address`` (an IPv4 or IPv6 literal) and ``port``.
    """
    return TCPAttempt().start(reactor, address, port)
