"""
A shortcut in front of twisted.web: a cache of the answer function, not a
second server.

Each connection starts with a :class:`ShortcutProtocol`.  For a request
head that :func:`~pgstatus.http.head.parse_head` takes (a whitelist of
RFC 9112 syntax, for the routes the route table answers from the view), it
calls the same answer function the Klein application calls and sends the
bytes twisted.web would send for that answer (:mod:`pgstatus.http.replay`).
At the first byte it does not fully understand, the connection, with every
byte not yet answered, goes to an ordinary twisted.web channel of the
:class:`~twisted.web.server.Site` serving the Klein resource, and stays
there.  A differential test holds both paths to the same bytes.

Sending: while nothing has ever been queued on the connection's transport,
an answer goes to the socket at once through
:meth:`~twisted.internet.interfaces.ITCPTransport.getHandle` (plain TCP or
UNIX sockets only); what the socket does not take is queued on the
transport, which from then on sends everything.  The transport is never
written to behind queued bytes, so the order of answers holds.

Flow control: the protocol is the transport's streaming producer; when the
transport's buffer fills (a client that does not read its answers), it
stops reading and answering until the buffer drains.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (
    IProtocolNegotiationFactory,
    IPushProducer,
    ISSLTransport,
    ITransport,
)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.server import Site
from zope.interface import directlyProvides, implementer, providedBy

from pgstatus.http.answer import Response
from pgstatus.http.head import Head, HeadMemo, plausible
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

    def dataReceived(self, data: bytes) -> None:
        if self.channel is not None:
            self._forward(data)
            return
        self._active_at = self.site.clock.seconds()
        self._buf += data
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
        while self._buf and not (self._waiting or self._paused or self._closed):
            buf = self._buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if not plausible(buf):
                    self._hand_over()
                elif self._head_since is None:
                    self._head_since = site.clock.seconds()
                return
            head = buf[:end + 4]
            parsed = site.heads.get(head)
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
            if isinstance(r, Deferred):
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
        self._send(before + site.date.line() + after)
        if parsed.close:
            self._buf = b""
            self._closed = True
            self.release()
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
        self.channel.makeConnection(_ChannelTransport(self))
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
        idle too long before any hand-over.
        """
        site = self.site
        since = self._head_since
        if since is not None and now - since > site.header_timeout:
            self._head_since = None
            # every transport the listeners make (TCP, UNIX, TLS) has it
            self.transport.abortConnection()
            return
        if self.channel is None and not self._waiting and not self._buf \
                and now - self._active_at > site.idle_timeout:
            self.release()
            self.transport.loseConnection()

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


class _ChannelTransport:
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
