"""
The front every HTTP connection starts with, shaped like Twisted's protocol
wrappers (:class:`~twisted.protocols.policies.ProtocolWrapper`).  Its
contract:

1. A request whose head the answer cache (:mod:`pgstatus.http.cache`) fully
   validates is answered from the cache; from the first one it does not,
   the connection belongs to a channel of the twisted.web site serving the
   Klein application.
2. That channel is fed one request at a time, the next only once the
   previous answer is complete and the transport is not paused, so a
   connection holds at most one head, one answer and the socket buffers.
3. A head deadline runs from the connection's start (TLS handshake and
   PROXY header included) and from each later request's first byte until
   its head is whole; otherwise the front's idle timeout rules before a
   hand-over, twisted.web's own timeouts after it.

No HTTP parser is needed for 2: bytes go to the channel one CRLF-ended
piece at a time, and a request needs a line end after its first byte (its
head's blank line), so no piece completes two.  The site reports a request
received (:meth:`QuietSite.getResourceFor`), the request its answer done
(``notifyFinish``).  Direct sends: while the transport has never queued
anything, a cached answer goes straight to the socket (TCP and UNIX only);
after the first partial send the transport sends everything, in order.
"""

from __future__ import annotations

import socket
from typing import Any

from twisted.internet.interfaces import (
    IHalfCloseableProtocol,
    IProtocol,
    IProtocolNegotiationFactory,
    IPushProducer,
    IReadWriteDescriptor,
    ISSLTransport,
    ITransport,
)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import Site
from zope.interface import directlyProvides, implementer, providedBy

from pgstatus.http.cache import AnswerCache, Reply
from pgstatus.http.head import plausible

log = Logger(namespace="pgstatus.http")

#: what a read at connection takes at most (the transport's own read size)
READ_SIZE = 65536
#: the longest request head twisted.web reads (its line and head limit)
MAX_HEAD_BYTES = 16384
#: a connection stops reading while it holds this many bytes not yet answered
MAX_HELD = 65536
#: seconds between two log lines about client bytes twisted.web choked on
FAULT_LOG_INTERVAL = 10.0

BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
        b"Connection: close\r\n\r\n")
_TOO_LARGE_BODY = b'{"error_text": "request head too large"}'
TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
             % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY))
#: twisted.web's own answer to a request it cannot parse
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\n\r\n"


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
        self._fault_logged_at = float("-inf")
        self._faults_unlogged = 0

    def buildProtocol(self, addr: Any) -> Protocol:
        """
        A front, or past ``max_connections`` a 503 and a close.
        """
        if self.connections >= self.max_connections:
            self.refused += 1
            return _Busy()
        return Front(self, addr)

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
        self._faults_unlogged += 1
        now = self.clock.seconds()
        if now - self._fault_logged_at >= FAULT_LOG_INTERVAL:
            self._fault_logged_at = now
            log.warn("bad request refused error={error} count={count}", error=what[:200],
                     count=self._faults_unlogged)
            self._faults_unlogged = 0

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


class QuietSite(Site):
    """
    The twisted.web site behind the fronts: no access log (the API is called
    on every application request); each request about to be rendered is
    reported to its connection's front.
    """

    noisy = False

    def __init__(self, resource: Any, reactor: Any, idle_timeout: float) -> None:
        super().__init__(resource, reactor=reactor, timeout=idle_timeout)

    def log(self, request: Any) -> None:
        pass

    def getResourceFor(self, request: Any) -> Any:
        transport = getattr(getattr(request, "channel", None), "transport", None)
        if isinstance(transport, ChannelTransport):
            transport.front.received(request)
        return super().getResourceFor(request)


@implementer(IPushProducer, IHalfCloseableProtocol)
class Front(Protocol):
    """
    One connection.  The transport's producer throughout: while its buffer
    is full the front neither reads nor answers, and pauses the channel's
    producers.
    """

    #: set before connectionMade: a TCP, UNIX or TLS transport, or a wrapper
    transport: Any

    def __init__(self, factory: FrontFactory, addr: Any) -> None:
        self.factory = factory
        self.addr = addr
        self._buf = b""
        #: the twisted.web channel, once handed over
        self.channel: Any = None
        #: the channel's producer registration (the channel itself)
        self.inner: Any = None
        self._sock: socket.socket | None = None
        #: a cached answer is a Deferred not fired yet
        self._waiting = False
        #: the twisted.web request being answered
        self._in_flight: Any = None
        self._paused = False
        self._reading_paused = False
        self._producing = False
        self._pumping = False
        self._closed = False
        #: the client half-closed: it sends nothing more
        self._eof = False
        #: a request has been answered (the pre-request phase is over)
        self._served = False
        self._head_since: float | None = None
        self._active_at = 0.0
        #: when the connection was asked to close (a client that does not
        #: read its last answer holds that up)
        self._closing_since: float | None = None
        # fed to the channel of the request under way: head bytes, the
        # unfinished line, the head is whole
        self._head_bytes = 0
        self._line = b""
        self._in_body = False

    @property
    def direct(self) -> bool:
        return self._sock is not None

    # -- the connection ---------------------------------------------------
    def connectionMade(self) -> None:
        factory = self.factory
        factory.connections += 1
        self._active_at = factory.clock.seconds()
        factory.track(self)
        transport = self.transport
        transport.registerProducer(self, True)
        self._producing = True
        self._arm()
        if ISSLTransport.providedBy(transport):
            return
        get_handle = getattr(transport, "getHandle", None)
        handle = get_handle() if get_handle is not None else None
        if isinstance(handle, socket.socket):
            self._sock = handle
            # only the reactor's own TCP and UNIX transports: a wrapper (such
            # as a PROXY header's, itself a protocol) reads bytes of its own
            if IReadWriteDescriptor.providedBy(transport) and not IProtocol.providedBy(transport):
                self._read_at_once(handle)

    def _read_at_once(self, sock: socket.socket) -> None:
        """
        Read what came with the connection (``TCP_DEFER_ACCEPT``) without
        waiting a reactor turn: the transport reads nothing before the
        reactor reports the socket readable; an end of stream is left to it.
        """
        try:
            data = sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.transport.abortConnection()
            return
        if not data:
            return
        try:
            self.dataReceived(data)
        except Exception:
            # a fault of ours: as the reactor would for a read, log and drop
            log.failure("answering a connection's first bytes")
            self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        self._active_at = self.factory.clock.seconds()
        if self._closed:
            return
        self._buf = self._buf + data if self._buf else data
        self._pump()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = True
        factory = self.factory
        factory.connections -= 1
        factory.untrack(self)
        if self.channel is not None:
            self.channel.connectionLost(reason)

    def readConnectionLost(self) -> None:
        """
        A half-close (TCP and UNIX): answer what came, then close.
        """
        self._eof = True
        self._pump()

    def writeConnectionLost(self) -> None:
        pass

    # -- requests, one at a time ---------------------------------------------
    def _pump(self) -> None:
        """
        Answer, or feed the channel, one request at a time.
        """
        if self._pumping:
            return
        self._pumping = True
        try:
            while self._buf and not (self._closed or self._paused or self._waiting
                                     or self._in_flight is not None):
                if self.channel is not None:
                    self._feed()
                    continue
                # the answer cache (inline: every cached request passes here)
                buf = self._buf
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if plausible(buf):
                        break
                    self._hand_over()
                    continue
                got = self.factory.cache.serve(buf[:end + 4])
                if got is None:
                    self._hand_over()
                    continue
                self._buf = buf[end + 4:]
                self._head_since = None
                self._served = True
                if got.__class__ is tuple:
                    data, close = got
                    if close:
                        # through the transport: it sends it and closes in one turn
                        self._close_gently(data)
                    else:
                        self._send(data)
                else:
                    self._waiting = True
                    got.addCallbacks(self._replied_later, self._failed_later)
        finally:
            self._pumping = False
        if self._buf or self._head_bytes or self._head_since is not None or self._eof \
                or not self._served or self._reading_paused or self._in_flight is not None \
                or self._waiting:
            # (the common case, a request answered and nothing left, skips this)
            if self._eof and not (self._closed or self._paused or self._waiting
                                  or self._in_flight is not None):
                # answered all the client sent (bar an unfinished request)
                self._close_gently()
            self._arm()
            self._update_reading()

    def _replied_later(self, reply: Reply) -> None:
        self._waiting = False
        if self._closed:
            return
        self._active_at = self.factory.clock.seconds()
        self._reply(reply)
        self._pump()

    def _failed_later(self, failure: Failure) -> None:
        self._waiting = False
        log.failure("answering a request", failure)
        if not self._closed:
            self.transport.abortConnection()

    def _reply(self, reply: Reply) -> None:
        data, close = reply
        if close:
            # through the transport, which sends it and closes in one turn
            self._close_gently(data)
        else:
            self._send(data)

    def _send(self, data: bytes) -> None:
        sock = self._sock
        if sock is not None:
            try:
                sent = sock.send(data)
            except OSError:
                # EAGAIN, or an error the transport sees at its next turn
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
            self._sock = None
        self.transport.write(data)

    def _close_gently(self, answer: bytes = b"") -> None:
        """
        Send ``answer`` and close once the transport has sent what it holds.
        """
        if answer:
            self._sock = None
            self._send(answer)
        self._closed = True
        self._buf = b""
        self.release()
        self._closing_since = self.factory.clock.seconds()
        self.transport.loseConnection()

    def _hand_over(self) -> None:
        self._sock = None
        self.channel = self.factory.web.buildProtocol(self.addr)
        self.channel.makeConnection(ChannelTransport(self))

    def _feed(self) -> None:
        """
        Feed the channel up to the first CRLF (one split between reads
        counts), counting the head's bytes against its limit.
        """
        buf = self._buf
        if buf[:1] == b"\n" and self._line[-1:] == b"\r":
            end = 1
        else:
            i = buf.find(b"\r\n")
            end = len(buf) if i < 0 else i + 2
        piece, self._buf = buf[:end], buf[end:]
        if not self._in_body:
            self._head_bytes += len(piece)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._close_gently(TOO_LARGE)
                return
            line = self._line + piece
            self._line = b"" if line.endswith(b"\r\n") else line
            # a blank line after others ends the head (a body may follow)
            self._in_body = line == b"\r\n" and self._head_bytes > 2
        try:
            self.channel.dataReceived(piece)
        except Exception as e:
            # twisted.web choked on the client's bytes (e.g. int() of a
            # Content-Length of thousands of digits)
            self.factory.fault(f"{type(e).__name__}: {e}")
            if self._closed:
                return
            if self._in_flight is None:
                self._close_gently(BAD_REQUEST)
            else:
                self.transport.abortConnection()

    def received(self, request: Any) -> None:
        """
        The channel has a whole request.
        """
        self._in_flight = request
        self._head_since = None
        self._head_bytes = 0
        self._line = b""
        self._in_body = False
        self._served = True
        request.notifyFinish().addBoth(self._finished)

    def _finished(self, result: object) -> None:
        self._in_flight = None
        if not self._closed:
            self._active_at = self.factory.clock.seconds()
            self._pump()

    def channel_closing(self) -> None:
        self._closed = True
        self._buf = b""
        self.release()
        self._closing_since = self.factory.clock.seconds()

    # -- deadlines -------------------------------------------------------------
    def _arm(self) -> None:
        if self._closed or self._waiting or self._in_flight is not None or self._in_body:
            self._head_since = None
        elif self._buf or self._head_bytes or not self._served:
            if self._head_since is None:
                self._head_since = self.factory.clock.seconds()
        else:
            self._head_since = None

    def check_deadlines(self, now: float) -> None:
        """
        Abort an overdue head or a close held up by a client that does not
        read; close a connection idle before any hand-over.
        """
        factory = self.factory
        closing = self._closing_since
        if closing is not None:
            if now - closing > factory.idle_timeout:
                self._closing_since = None
                self.transport.abortConnection()
            return
        since = self._head_since
        if since is not None and now - since > factory.header_timeout:
            self._head_since = None
            self.transport.abortConnection()
            return
        if self.channel is None and since is None and not self._waiting and not self._buf \
                and now - self._active_at > factory.idle_timeout:
            self._close_gently()

    # -- IPushProducer: the transport's buffer --------------------------------------
    def _update_reading(self) -> None:
        pause = self._paused or len(self._buf) >= MAX_HELD
        if pause != self._reading_paused and self._producing:
            self._reading_paused = pause
            if pause:
                self.transport.pauseProducing()
            else:
                self.transport.resumeProducing()

    def release(self) -> None:
        if self._producing:
            self._producing = False
            self.transport.unregisterProducer()

    def pauseProducing(self) -> None:
        if not self._paused:
            self._paused = True
            self._update_reading()
            if self.inner is not None:
                self.inner.pauseProducing()

    def resumeProducing(self) -> None:
        if self._paused:
            self._paused = False
            if self.inner is not None:
                self.inner.resumeProducing()
            self._pump()

    def stopProducing(self) -> None:
        self._closed = True
        if self.inner is not None:
            self.inner.stopProducing()


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
