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
   connection holds at most one request (a head and a body of 16 KiB
   each at most), one answer and the socket buffers.
3. A request deadline runs from the connection's start (TLS handshake and
   PROXY header included) and from each later request's first byte until
   the request is whole; otherwise the idle timeout rules: the front's
   before a hand-over and while its client does not read, twisted.web's
   after a hand-over.

No HTTP parser is needed for 2: bytes go to the channel one CRLF-ended
piece at a time, and a request needs a line end after its first byte, so
no piece completes two.  The site reports a request received
(:mod:`pgstatus.http.server`), the request its answer done
(``notifyFinish``).  Direct socket I/O: :mod:`pgstatus.http.sockio`.
"""

from __future__ import annotations

import socket
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IHalfCloseableProtocol, IPushProducer
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from pgstatus.http.cache import Reply
from pgstatus.http.head import plausible
from pgstatus.http.sockio import direct_socket, read_now, send_now

log = Logger(namespace="pgstatus.http")

#: the longest request head twisted.web reads (its line and head limit)
MAX_HEAD_BYTES = 16384
#: the longest request body passed on (no route takes one)
MAX_BODY_BYTES = 16384
#: a connection stops reading while it holds this many bytes not yet answered
MAX_HELD = 65536


def _refusal(status: bytes, text: bytes) -> bytes:
    body = b'{"error_text": "%s"}' % text
    return (b"HTTP/1.1 %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (status, len(body), body))


TOO_LARGE = _refusal(b"431 Request Header Fields Too Large", b"request head too large")
BODY_TOO_LARGE = _refusal(b"413 Content Too Large", b"request body too large")
#: twisted.web's own answer to a request it cannot parse
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\n\r\n"


@implementer(IPushProducer, IHalfCloseableProtocol)
class Front(Protocol):
    """
    One connection.  The transport's producer throughout: while its buffer
    is full the front neither reads nor answers, and pauses the channel's
    producers.

    :param factory: its :class:`~pgstatus.http.server.FrontFactory`.
    """

    transport: Any  # TCP, UNIX or TLS, or a wrapper

    def __init__(self, factory: Any, addr: Any) -> None:
        self.factory = factory
        self.addr = addr
        self._buf = b""
        #: the twisted.web channel once handed over, and its producer
        self.channel: Any = None
        self.inner: Any = None
        self._sock: socket.socket | None = None
        # a cached answer not ready yet; the twisted.web request in hand
        self._waiting: Deferred[Reply] | None = None
        self._in_flight: Any = None
        self._paused = self._reading_paused = self._producing = False
        self._pumping = self._closed = False
        # the client half-closed; a request was answered (the pre-request
        # phase is over)
        self._eof = self._served = False
        self._head_since: float | None = None
        self._active_at = 0.0
        # when asked to close (a client not reading its last answer holds that up)
        self._closing_since: float | None = None
        # fed to the channel of the request under way: head and body bytes,
        # the unfinished line, the head is whole
        self._head_bytes = self._body_bytes = 0
        self._line = b""
        self._in_body = False

    @property
    def direct(self) -> bool:
        return self._sock is not None  # (answers go straight to the socket)

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
        self._sock = sock = direct_socket(transport)
        if sock is None:
            return
        try:
            data = read_now(transport, sock)
        except OSError:
            transport.abortConnection()
            return
        try:
            if data:
                self.dataReceived(data)
        except Exception:
            # a fault of ours: as the reactor would for a read, log and drop
            log.failure("answering a connection's first bytes")
            transport.abortConnection()

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
        if self._waiting is not None:
            # a fresh read waiting for a client that is gone waits no more
            self._waiting.cancel()
        if self.channel is not None:
            self.channel.connectionLost(reason)

    def readConnectionLost(self) -> None:
        # a half-close: answer what came, then close
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
            while self._buf and not (self._closed or self._paused or self._waiting is not None
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
                    self._waiting = got
                    got.addCallbacks(self._replied_later, self._failed_later)
        finally:
            self._pumping = False
        if self._buf or self._head_bytes or self._head_since is not None or self._eof \
                or not self._served or self._reading_paused or self._in_flight is not None \
                or self._waiting is not None:
            # (the common case, a request answered and nothing left, skips this)
            if self._eof and not (self._closed or self._paused or self._waiting is not None
                                  or self._in_flight is not None):
                # answered all the client sent (bar an unfinished request)
                self._close_gently()
            self._arm()
            self._update_reading()

    def _replied_later(self, reply: Reply) -> None:
        self._waiting = None
        if self._closed:
            return
        self._active_at = self.factory.clock.seconds()
        data, close = reply
        if close:
            self._close_gently(data)
        else:
            self._send(data)
        self._pump()

    def _failed_later(self, failure: Failure) -> None:
        self._waiting = None
        if self._closed and failure.check(CancelledError):
            # cancelled by connectionLost: its client is gone
            return
        log.failure("answering a request", failure)
        if not self._closed:
            self.transport.abortConnection()

    def _send(self, data: bytes) -> None:
        sock = self._sock
        if sock is not None:
            sent = send_now(sock, data)
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
        self.channel = self.factory.connect_channel(self)

    def _feed(self) -> None:
        """
        Feed the channel one CRLF-ended piece at a time (one split between
        reads counts) until it holds a whole request, counting the head's and
        the body's bytes against their limits.  (One pass over the buffer: a
        body of bare CRLFs costs a call per piece, not a copy of the rest.)
        """
        buf = self._buf
        pos, n = 0, len(buf)
        while pos < n and not (self._closed or self._paused or self._in_flight is not None):
            if pos == 0 and buf[:1] == b"\n" and self._line[-1:] == b"\r":
                end = 1
            else:
                i = buf.find(b"\r\n", pos)
                end = n if i < 0 else i + 2
            piece = buf[pos:end]
            pos = end
            if self._in_body:
                self._body_bytes += len(piece)
                if self._body_bytes > MAX_BODY_BYTES:
                    self._close_gently(BODY_TOO_LARGE)
                    return
            else:
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
                return
        if not self._closed:
            self._buf = buf[pos:]

    def received(self, request: Any) -> None:
        """
        The channel has a whole request.
        """
        self._in_flight = request
        self._head_since = None
        self._head_bytes = self._body_bytes = 0
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
        if self._closed or self._waiting is not None or self._in_flight is not None \
                or self._paused:
            # (paused: its client does not read; the idle timeout rules)
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
        if now - self._active_at <= factory.idle_timeout:
            return
        if self._paused:
            # answers wait for a client that has not read for that long
            self.transport.abortConnection()
        elif self.channel is None and since is None and self._waiting is None and not self._buf:
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
            self._active_at = self.factory.clock.seconds()
            if self.inner is not None:
                self.inner.resumeProducing()
            self._pump()

    def stopProducing(self) -> None:
        self._closed = True
        if self.inner is not None:
            self.inner.stopProducing()
