"""
A controllable TCP proxy on the Twisted reactor, to put between the service
under test and a PostgreSQL server.

It is fully non-blocking, so it can share the reactor with the service under
test.  Modes apply at once to new connections:

- ``pass_()``: forward both ways (the default).
- ``refuse()``: stop listening, so connects are refused; any other mode
  listens again on the same port.
- ``hang()``: accept connections but never answer or forward; forwarded
  connections freeze too (nothing is read from either side, so data waits in
  the kernel, as with a SIGSTOPped server).  Leaving ``hang`` unfreezes them,
  and connections accepted meanwhile are handled by the new mode.
- ``close_after_startup()``: accept, read the client's first packet, then
  close (a pooler whose PostgreSQL is down).

``retarget()`` sends new connections to another server.  Existing
connections are kept unless ``drop_existing=True`` (or ``drop_connections()``).

Mode methods return a Deferred that fires once the listening socket is in the
requested state.  Use ``.host``/``.port`` as the address for the client.
There is no flow control: fine for PostgreSQL protocol tests, not for bulk
data.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, DeferredList, DeferredLock, succeed
from twisted.internet.protocol import ClientFactory, Factory, Protocol
from twisted.python.failure import Failure

PASS = "pass"
REFUSE = "refuse"
HANG = "hang"
CLOSE_AFTER_STARTUP = "close_after_startup"


class _Upstream(Protocol):
    """The proxy's connection to the target server."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self.client._upstream_made(self)

    def dataReceived(self, data: bytes) -> None:
        self.client.transport.write(data)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.client.transport.loseConnection()
        self.lost.callback(None)


class _UpstreamFactory(ClientFactory):
    def __init__(self, client: _Client) -> None:
        self.client = client

    def buildProtocol(self, addr: Any) -> _Upstream:
        return _Upstream(self.client)

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        self.client.connector = None
        self.client.transport.abortConnection()


class _Client(Protocol):
    """One accepted client connection."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy
        self.upstream: _Upstream | None = None
        self.connector: Any = None
        self.buffer: list[bytes] = []
        self.state = "new"  # new | pending | forwarding | closing
        self.frozen = False
        self.lost: Deferred[None] = Deferred()

    def connectionMade(self) -> None:
        self.proxy.accepted += 1
        self.proxy._clients.add(self)
        self.handle(self.proxy.mode)

    def handle(self, mode: str) -> None:
        """Deal with a connection that is not forwarding yet."""
        if mode == PASS:
            self.state = "forwarding"
            self.connector = self.proxy._reactor.connectTCP(
                self.proxy.target_host,
                self.proxy.target_port,
                _UpstreamFactory(self),
                timeout=self.proxy.connect_timeout,
            )
        elif mode == HANG:
            self.state = "pending"
            self.freeze()
        elif mode == CLOSE_AFTER_STARTUP:
            self.state = "closing"
            if self.buffer:
                self.transport.loseConnection()
        else:  # REFUSE: accepted just before the listener closed
            self.transport.abortConnection()

    def freeze(self) -> None:
        self.frozen = True
        self.transport.pauseProducing()
        if self.upstream is not None:
            self.upstream.transport.pauseProducing()

    def thaw(self, mode: str) -> None:
        self.frozen = False
        self.transport.resumeProducing()
        if self.upstream is not None:
            self.upstream.transport.resumeProducing()
        if self.state == "pending":
            self.handle(mode)

    def _upstream_made(self, upstream: _Upstream) -> None:
        self.connector = None
        self.upstream = upstream
        self.proxy.forwarded += 1
        if self.buffer:
            upstream.transport.write(b"".join(self.buffer))
            self.buffer = []
        if self.frozen:
            upstream.transport.pauseProducing()

    def dataReceived(self, data: bytes) -> None:
        if self.state == "closing":
            self.transport.loseConnection()
        elif self.upstream is not None:
            self.upstream.transport.write(data)
        else:
            self.buffer.append(data)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.proxy._clients.discard(self)
        if self.upstream is not None:
            self.upstream.transport.loseConnection()
        elif self.connector is not None:
            self.connector.disconnect()
            self.connector = None
        self.lost.callback(None)

    def abort(self) -> Deferred[Any]:
        """Close both sides at once; fires when both are closed."""
        ds = [self.lost]
        self.transport.abortConnection()
        if self.upstream is not None:
            ds.append(self.upstream.lost)
            self.upstream.transport.abortConnection()
        elif self.connector is not None:
            self.connector.disconnect()
        return DeferredList(ds)


class _ClientFactory(Factory):
    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy

    def buildProtocol(self, addr: Any) -> _Client:
        return _Client(self.proxy)


class TcpProxy:
    """
    A TCP proxy from ``host:port`` to ``target_host:target_port``.

    :param reactor: provides IReactorTCP (the reactor the test runs).
    :param target_host: where connections are forwarded (an IP address).
    :param target_port: ... and its port.
    :param listen_host: the address to listen on.
    :param connect_timeout: seconds for connecting upstream; on failure the
        client connection is reset.
    :ivar accepted: connections accepted so far.
    :ivar forwarded: upstream connections established so far.
    :ivar mode: the current mode name.
    """

    def __init__(
        self,
        reactor: Any,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        connect_timeout: float = 5,
    ) -> None:
        self._reactor = reactor
        self.target_host = target_host
        self.target_port = target_port
        self.host = listen_host
        self.port: int = 0
        self.connect_timeout = connect_timeout
        self.mode = PASS
        self.accepted = 0
        self.forwarded = 0
        self._clients: set[_Client] = set()
        self._factory = _ClientFactory(self)
        self._listener: Any = None
        self._lock = DeferredLock()
        self._stopped = False

    def __repr__(self) -> str:
        return (
            f"<TcpProxy {self.host}:{self.port} -> {self.target_host}:{self.target_port}"
            f" {self.mode}>"
        )

    @property
    def active(self) -> int:
        """Client connections currently open."""
        return len(self._clients)

    @property
    def listening(self) -> bool:
        """True while the listening socket is open."""
        return self._listener is not None

    def start(self) -> int:
        """Listen (on a free port the first time) in pass mode; return the port."""
        self._listener = self._reactor.listenTCP(self.port, self._factory, interface=self.host)
        self.port = self._listener.getHost().port
        return self.port

    # -- modes -----------------------------------------------------------------

    def pass_(self) -> Deferred[None]:
        """Forward both ways; listen again if refusing."""
        return self._set_mode(PASS)

    def refuse(self, drop_existing: bool = False) -> Deferred[None]:
        """Stop listening, so new connects are refused; connections accepted
        and still pending are reset."""
        return self._set_mode(REFUSE, drop_existing)

    def hang(self) -> Deferred[None]:
        """Accept and never answer; freeze existing forwarded connections."""
        return self._set_mode(HANG)

    def close_after_startup(self, drop_existing: bool = False) -> Deferred[None]:
        """Accept, read the client's first packet, then close."""
        return self._set_mode(CLOSE_AFTER_STARTUP, drop_existing)

    def retarget(self, host: str, port: int, drop_existing: bool = False) -> Deferred[None]:
        """
        Send new connections to ``host:port``.

        :param drop_existing: also close the current connections.
        """
        self.target_host = host
        self.target_port = port
        if drop_existing:
            return self.drop_connections()
        return succeed(None)

    def drop_connections(self) -> Deferred[None]:
        """Reset every current connection; fires when all are closed."""
        d = DeferredList([c.abort() for c in list(self._clients)])
        return d.addCallback(lambda _: None)

    def _set_mode(self, mode: str, drop_existing: bool = False) -> Deferred[None]:
        if self._stopped:
            raise RuntimeError("proxy stopped")
        old, self.mode = self.mode, mode
        dropping = self.drop_connections() if drop_existing else succeed(None)
        for c in list(self._clients):
            if mode == HANG:
                c.freeze()
            elif old == HANG and c.frozen:
                c.thaw(mode)
        d = self._lock.run(self._listen, mode != REFUSE)
        return DeferredList([dropping, d], fireOnOneErrback=True, consumeErrors=True).addCallback(
            lambda _: None
        )

    def _listen(self, want: bool) -> Deferred[Any] | None:
        if want and self._listener is None and not self._stopped:
            self._listener = self._reactor.listenTCP(self.port, self._factory, interface=self.host)
        elif not want and self._listener is not None:
            listener, self._listener = self._listener, None
            return listener.stopListening()
        return None

    def stop(self) -> Deferred[None]:
        """Stop listening and reset every connection; fires when all is closed."""
        self._stopped = True
        self.mode = REFUSE

        def close() -> Deferred[Any] | None:
            if self._listener is None:
                return None
            listener, self._listener = self._listener, None
            return listener.stopListening()

        d = DeferredList([self._lock.run(close), self.drop_connections()])
        return d.addCallback(lambda _: None)
