"""
One connection in front of twisted.web: answered by the shortcut until the
first byte it does not fully understand, then handed, with every byte not
yet answered, to a twisted.web channel (see :mod:`pgstatus.http.shortcut`
for the whole design).

Sending: while nothing has ever been queued on the connection's transport,
an answer goes to the socket at once through
:meth:`~twisted.internet.interfaces.ITCPTransport.getHandle` (plain TCP or
UNIX sockets only); what the socket does not take is queued on the
transport, which from then on sends everything.  The transport is never
written to behind queued bytes, so the order of answers holds.  The answer
that ends a connection (``Connection: close``, HTTP/1.0) always goes
through the transport, so that it leaves with the connection's close.

Flow control: the protocol is the transport's streaming producer, before
and after the hand-over (the channel gets a :class:`ChannelTransport`);
when the transport's buffer fills (a client that does not read its
answers), it stops reading and answering until the buffer drains.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from twisted.internet.interfaces import (
    IProtocol,
    IPushProducer,
    IReadWriteDescriptor,
    ISSLTransport,
)
from twisted.internet.protocol import Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import directlyProvides, implementer, providedBy

from pgstatus.http.answer import Response
from pgstatus.http.head import Head, plausible

log = Logger(namespace="pgstatus.http")

#: what a read at connection takes at most (the transport's own read size)
READ_SIZE = 65536

if TYPE_CHECKING:
    from pgstatus.http.shortcut import ShortcutSite


@implementer(IPushProducer)
class ShortcutProtocol(Protocol):
    """
    One connection, answered by the shortcut until it hands over.
    """

    #: set before connectionMade: a TCP, UNIX or TLS transport, which is an
    #: ITCPTransport, an IConsumer and an IPushProducer
    transport: Any

    def __init__(self, site: ShortcutSite, addr: Any) -> None:
        self.site = site
        self.addr = addr
        self._buf = b""
        #: the twisted.web channel, once handed over
        self.channel: Any = None
        self._sock: socket.socket | None = None
        self._waiting = False
        self._paused = False
        #: the twisted.web channel asked its transport to stop reading
        self._channel_paused = False
        self._reading_paused = False
        self._producing = False
        #: the channel's own producer registration (the channel itself)
        self.inner: Any = None
        self._closed = False
        self._head_since: float | None = None
        self._active_at = 0.0
        #: when the shortcut asked the transport to close (it first sends
        #: what it holds, which a client that does not read can hold up)
        self._closing_since: float | None = None
        #: the last bytes forwarded after the hand-over, to find head ends
        self._tail = b""

    @property
    def direct(self) -> bool:
        """
        Answers still go straight to the socket (nothing was ever queued
        on the transport).
        """
        return self._sock is not None

    # -- the connection ---------------------------------------------------
    def connectionMade(self) -> None:
        site = self.site
        site.connections += 1
        self._active_at = site.clock.seconds()
        site.track(self)
        transport = self.transport
        transport.registerProducer(self, True)
        self._producing = True
        if not site.enabled:
            self._hand_over()
            return
        handle = None
        if not ISSLTransport.providedBy(transport):
            get_handle = getattr(transport, "getHandle", None)
            handle = get_handle() if get_handle is not None else None
        if isinstance(handle, socket.socket):
            self._sock = handle
            # only the reactor's own TCP and UNIX transports: a wrapper
            # (e.g. the haproxy: endpoint's, itself a protocol) has bytes of
            # its own to read first
            if IReadWriteDescriptor.providedBy(transport) and not IProtocol.providedBy(transport):
                self._read_at_once(handle)

    def _read_at_once(self, sock: socket.socket) -> None:
        """
        Read what arrived with the connection.  The listening socket defers
        accepting until a request has arrived (``TCP_DEFER_ACCEPT``), so
        this usually answers it without waiting a reactor turn for the
        socket to be reported readable.  Safe because the transport reads
        nothing of its own before the reactor reports the socket readable;
        an end of stream is left for the transport to find at its own next
        read (it stays reported), an error closes the connection now.
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
            # a fault of ours, not of the client's bytes: as the reactor
            # would for a read, log it and drop the connection
            log.failure("answering a connection's first bytes")
            self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self.channel is not None:
            self._forward(data)
            return
        self._active_at = self.site.clock.seconds()
        self._buf = self._buf + data if self._buf else data
        self._answer_heads()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = True
        site = self.site
        site.connections -= 1
        site.untrack(self)
        if self.channel is not None:
            self.channel.connectionLost(reason)

    # -- the shortcut --------------------------------------------------------
    def _answer_heads(self) -> None:
        site = self.site
        heads = site.heads
        while self._buf and not (self._waiting or self._paused or self._closed):
            buf = self._buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if not plausible(buf):
                    self._hand_over()
                elif self._head_since is None:
                    self._head_since = site.clock.seconds()
                return
            parsed = heads.get(buf[:end + 4])
            if parsed is None:
                self._hand_over()
                return
            try:
                r = site.answer(parsed.route, parsed.query, parsed.as_json)
            except Exception:
                # not ours to judge: twisted.web and Klein answer (and log) it
                self._hand_over()
                return
            self._buf = buf[end + 4:]
            self._head_since = None
            # (a plain class check: Deferred's, an ABC's, costs more)
            if not isinstance(r, Response):
                self._waiting = True
                r.addCallback(self._answered_later, parsed)
                return
            self._send_answer(r, parsed)
        if self._buf and self._head_since is None and self.channel is None:
            self._head_since = site.clock.seconds()

    def _answered_later(self, r: Response, parsed: Head) -> None:
        self._waiting = False
        if self._closed:
            return
        self._send_answer(r, parsed)
        self._answer_heads()

    def _send_answer(self, r: Response, parsed: Head) -> None:
        site = self.site
        site.count(parsed.route, r.status)
        before, after = site.replay.parts(r, parsed.head_only, parsed.close)
        if parsed.close:
            # The last answer goes through the transport, which sends it and
            # closes in the same turn.  Sent straight to the socket, it
            # reached the client a turn before the close, so the client
            # closed first and held the TIME_WAIT (bench/README.md).
            self._sock = None
        self._send(before + site.date.line() + after)
        if parsed.close:
            self._buf = b""
            self._closed = True
            self._close_gently()

    def _close_gently(self) -> None:
        """
        Close once the transport has sent what it holds.
        """
        self.release()
        self._closing_since = self.site.clock.seconds()
        self.transport.loseConnection()

    def _send(self, data: bytes) -> None:
        """
        Send ``data`` after everything sent before it: straight to the
        socket while the transport has never queued anything (the
        invariant that makes it safe), else through the transport.
        """
        sock = self._sock
        if sock is not None:
            try:
                sent = sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                # the transport sees the error at its next read or write
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
            # from now on the transport may hold bytes: it sends everything
            self._sock = None
        self.transport.write(data)

    def _hand_over(self) -> None:
        """
        Give the connection, with every byte not answered yet, to a
        twisted.web channel.
        """
        if self.channel is not None or self._closed:
            return
        site = self.site
        self._sock = None
        self.channel = site.web.buildProtocol(self.addr)
        self.channel.makeConnection(ChannelTransport(self))
        data, self._buf = self._buf, b""
        self._head_since = None
        if data:
            self._forward(data)

    def _forward(self, data: bytes) -> None:
        """
        Pass bytes to the twisted.web channel, keeping the request-head
        deadline: a head is under way from its first byte until its blank
        line.  (The API takes no bodies; a request with one is answered,
        405 or 400, before the client could dribble it.)
        """
        seen = self._tail + data
        if b"\r\n\r\n" in seen or b"\n\n" in seen:
            rest = seen.rsplit(b"\n\n", 1)[-1] if b"\n\n" in seen else seen
            self._head_since = self.site.clock.seconds() if rest.strip(b"\r") else None
        elif self._head_since is None:
            self._head_since = self.site.clock.seconds()
        self._tail = seen[-3:]
        self.channel.dataReceived(data)

    def check_deadlines(self, now: float) -> None:
        """
        Close the connection if its request head is overdue, or if it sat
        idle too long before any hand-over; abort it if, closing, it still
        holds answers a client has not read for as long.
        """
        site = self.site
        closing = self._closing_since
        if closing is not None:
            if now - closing > site.idle_timeout:
                self._closing_since = None
                self.transport.abortConnection()
            return
        since = self._head_since
        if since is not None and now - since > site.header_timeout:
            self._head_since = None
            # every transport the listeners make (TCP, UNIX, TLS) has it
            self.transport.abortConnection()
            return
        if self.channel is None and not self._waiting and not self._buf \
                and now - self._active_at > site.idle_timeout:
            self._close_gently()

    # -- IPushProducer: the transport's buffer ----------------------------------
    def _update_reading(self) -> None:
        """
        Read while neither the transport's buffer is full nor the channel
        asked for a pause.
        """
        pause = self._paused or self._channel_paused
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                self.transport.pauseProducing()
            else:
                self.transport.resumeProducing()

    def release(self) -> None:
        """
        Stop being the transport's producer (the connection is closing).
        """
        if self._producing:
            self._producing = False
            self.transport.unregisterProducer()

    def channel_pausing(self, pause: bool) -> None:
        """
        The twisted.web channel paused (or resumed) reading its transport.
        """
        self._channel_paused = pause
        self._update_reading()

    def pauseProducing(self) -> None:
        """
        The transport's buffer is full: stop reading and answering, on both
        paths (twisted.web does not stop reading while it handles a
        request, so a client sending pipelined requests and reading none of
        the answers would have them buffered without bound).
        """
        if not self._paused:
            self._paused = True
            self._update_reading()
            if self.inner is not None:
                self.inner.pauseProducing()

    def resumeProducing(self) -> None:
        """
        The buffer drained: read and answer again.
        """
        if self._paused:
            self._paused = False
            self._update_reading()
            if self.inner is not None:
                self.inner.resumeProducing()
            elif self.channel is None:
                self._answer_heads()

    def stopProducing(self) -> None:
        """
        The connection is going away.
        """
        self._closed = True
        if self.inner is not None:
            self.inner.stopProducing()


class ChannelTransport:
    """
    The transport a twisted.web channel gets at the hand-over: the
    connection's own, whose producer stays the :class:`ShortcutProtocol`,
    so that the connection stops reading when its buffer fills whatever the
    channel is doing.  The channel's producer registration and its pauses
    of reading go to the protocol; everything else to the transport, which
    this object provides the interfaces of.
    """

    def __init__(self, owner: ShortcutProtocol) -> None:
        self._owner = owner
        self._transport = owner.transport
        directlyProvides(self, providedBy(self._transport))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def registerProducer(self, producer: Any, streaming: bool) -> None:
        self._owner.inner = producer

    def unregisterProducer(self) -> None:
        # the channel lets go only as it closes the connection: so does the
        # protocol, for the transport to close once its buffer is sent
        self._owner.inner = None
        self._owner.release()

    def pauseProducing(self) -> None:
        self._owner.channel_pausing(True)

    def resumeProducing(self) -> None:
        self._owner.channel_pausing(False)

    def stopProducing(self) -> None:
        self._transport.stopProducing()
