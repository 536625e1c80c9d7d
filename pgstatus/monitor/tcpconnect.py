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
    One TCP connection attempt: :attr:`connected` fires with the protocol once
    TCP connects, or fails with the reason.  Cancelling it stops connecting.
    (``reactor.connectTCP`` rather than an endpoint, so that the start does
    not import ``twisted.internet.endpoints`` for it.)
    """

    noisy = False
    protocol = _Connected

    def __init__(self) -> None:
        self.connected: Deferred[_Connected] = Deferred(self._cancel)
        self.connector: IConnector | None = None

    def made(self, proto: _Connected) -> None:
        if not self.connected.called:
            self.connected.callback(proto)
        else:  # cancelled just as it connected
            proto.transport.abortConnection()

    def clientConnectionFailed(self, connector: IConnector, reason: Failure) -> None:
        if not self.connected.called:
            self.connected.errback(reason)

    def _cancel(self, d: Deferred[_Connected]) -> None:
        if self.connector is not None:
            self.connector.stopConnecting()


def connect_tcp(reactor: Any, address: str, port: int) -> Deferred[_Connected]:
    """
    Connect TCP to ``address`` (an IPv4 or IPv6 literal) and ``port``.
    """
    attempt = TCPAttempt()
    attempt.connector = reactor.connectTCP(address, port, attempt, timeout=3600)
    return attempt.connected
