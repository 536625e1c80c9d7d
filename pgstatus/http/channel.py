"""
The fast path's channel: one connection's requests, read from the socket,
answered from the memo of response bytes when their head was seen before,
and handed to twisted.web from the first request the fast path does not
answer (see :mod:`pgstatus.http.fastpath`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.main import CONNECTION_DONE
from twisted.internet.protocol import Protocol
from twisted.internet.tcp import Server as _TCPServer
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from zope.interface import implementer

from pgstatus.http.answer import EMPTY_404, Response
from pgstatus.http.params import wants_json
from pgstatus.http.responses import Renderer
from pgstatus.http.transport import DIRECT, NODELAY_INHERITED, Connection
from pgstatus.http.wire import (
    FALLBACK,
    FIXED,
    HEADER_LENGTHS,
    HTTP_1_0,
    KLEIN_PATHS,
    LABELS,
    NOT_FAST,
    PLAIN_PATH,
    REPLICA,
    REPLICA_PATHS,
    ROTATE,
    Wire,
    query_args,
)

if TYPE_CHECKING:
    from pgstatus.http.fastpath import FastSite

#: longest request head the fast path looks at; longer ones go to Klein
MAX_HEAD = 8192
#: longest request head accepted at all (``HTTPChannel.totalHeadersSize``,
#: twisted.web's own limit)
MAX_TOTAL = 16384
#: longest request head whose meaning is memoised, and how many are
MAX_MEMO_HEAD = 1024
MAX_MEMO_HEADS = 512
_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
              b"Connection: close\r\n\r\n")
#: most bytes buffered behind a waiting answer before the client is cut off
MAX_PENDING = 65536
#: most header lines the fast path reads (twisted.web's HTTPChannel.maxHeaders)
MAX_HEADERS = 500
#: bytes twisted.web refuses in a request head (it answers 400): such heads go to it
_ODD_BYTES = re.compile(rb"[^\x20-\x7e\r\n\t]")


log = Logger(namespace="pgstatus.http")

#: the reason an answer's connection is closed (one Failure for all)
_DONE = Failure(CONNECTION_DONE)


@implementer(IPushProducer)
class FastChannel(Protocol):
    """
    The protocol described in the module docstring.

    It is the transport's streaming producer, as ``twisted.web``'s channel
    is: when the client does not read its answers and the transport's
    buffer fills, reading stops until it drains.
    """

    #: the site that made this channel
    site: FastSite
    #: ``tcp.Server`` or its subclass :class:`~pgstatus.http.transport.Connection`
    #: (the listener's), whose attributes the fast path reads
    transport: _TCPServer
    #: read by connectionMade (see pgstatus.http.transport.Connection.read_first)
    reads_first = True
    #: the twisted.web channel everything goes to after the hand-off
    _web: Any = None
    _blocked = False
    _buf = b""
    #: when the incomplete request head in _buf started to arrive
    _head_since = 0.0
    #: when data last arrived (or the connection was made)
    _last = 0.0
    _closed = False

    def connectionMade(self) -> None:
        site = self.site
        site.connections += 1
        t = self.transport
        if t.__class__ is _TCPServer or (t.__class__ is Connection and not NODELAY_INHERITED):
            t.setTcpNoDelay(True)
        t.registerProducer(self, True)
        self._last = site.seconds()
        site._track(self)
        if t.__class__ is Connection:
            t.read_first()  # the request has usually arrived (TCP_DEFER_ACCEPT)

    def connectionLost(self, reason: Any = None) -> None:
        if self._closed:
            return
        self._closed = True
        site = self.site
        site.connections -= 1
        site._channels.pop(self, None)
        if self._web is not None:
            self._web.connectionLost(reason)

    # IPushProducer, for the transport
    def pauseProducing(self) -> None:
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        if not self._closed:
            self.transport.resumeProducing()

    def stopProducing(self) -> None:
        pass

    def check_deadlines(self, now: float) -> None:
        """
        Called by the site's sweep: cut a request head that takes longer
        than ``header_timeout``, close a connection idle for
        ``idle_timeout`` (abort it if answers are still queued: the client
        stopped reading).
        """
        if self._web is not None or self._blocked:
            return
        site = self.site
        t = self.transport
        if self._buf and now - self._head_since >= site.header_timeout:
            t.abortConnection()
        elif now - self._last >= site.timeout:
            if t.__class__ in DIRECT and (t.dataBuffer or t._tempDataLen):
                t.abortConnection()
            else:
                self._lose()

    def dataReceived(self, data: bytes) -> None:
        if self._web is not None:
            self._web.dataReceived(data)
            return
        site = self.site
        now = self._last = site.seconds()
        if not self._buf and not self._blocked:
            wire = site.wire
            hit = wire.heads.get(data)
            if hit is not None and wire.view is site.renderer.current():
                # a request seen before, alone in this read: the common case
                kind = hit[0]
                if kind is FIXED:
                    _, key, status, tail, close = hit
                elif kind is ROTATE:
                    _, rr_key, answers, close = hit
                    status, tail, key = answers[site.renderer.rr.next(rr_key, len(answers))]
                elif kind is FALLBACK:
                    _, key, status, tail, close, why = hit
                    fallbacks = site.renderer.fallbacks
                    fallbacks[why] = fallbacks.get(why, 0) + 1
                else:
                    kind = None
                if kind is not None:
                    counts = site.renderer.requests
                    counts[key] = counts.get(key, 0) + 1
                    self._send(status + site.date.line(now) + tail)
                    if close:
                        self._close()
                    return
            self._buf = data
        else:
            self._buf += data
            if self._blocked:
                if len(self._buf) > MAX_PENDING:
                    self._lose()
                return
        self._process(now)
        if self._buf and self._web is None and not self._head_since:
            # a request head must arrive complete within header_timeout
            self._head_since = now

    def _process(self, now: float) -> None:
        buf = self._buf
        site = self.site
        out: list[bytes] = []
        while buf:
            end = buf.find(b"\r\n\r\n", 0, MAX_TOTAL + 4)
            if end < 0:
                if len(buf) > MAX_TOTAL:
                    self._buf = b""
                    out.append(_TOO_LARGE)
                    self._flush(out)
                    self._lose()
                    return
                self._buf = buf
                self._flush(out)
                return
            if end > MAX_HEAD or not site.fast:
                break  # a big but acceptable head: twisted.web parses it
            try:
                answer = self._answer(buf[:end + 4], site, now)
            except Exception:
                # let Klein answer (and log) whatever went wrong here
                answer = None
            if answer is None:
                break
            buf = buf[end + 4:]
            self._head_since = 0.0
            if isinstance(answer, Deferred):
                got: list[Any] = []
                answer.addBoth(got.append)
                if not got:
                    # answer later; requests pipelined behind it wait their turn
                    self._flush(out)
                    self._buf = buf
                    self._blocked = True
                    answer.addCallback(lambda _, got: self._settled(got[0]), got)
                    return
                if isinstance(got[0], Failure):
                    self._flush(out)
                    self._broken(got[0])
                    return
                # answered already (no wait): go on in this loop, not deeper
                answer = got[0]
            data_out, close = answer
            out.append(data_out)
            if close:
                self._buf = b""
                self._flush(out)
                self._close()
                return
        else:
            self._buf = b""
            self._head_since = 0.0
            self._flush(out)
            return
        # Hand this and everything after it to twisted.web and Klein, after
        # the answers before it.
        self._flush(out)
        self._buf = b""
        self._head_since = 0.0
        self._hand_off(buf)

    def _hand_off(self, data: bytes) -> None:
        """
        From now on, the connection is a ``twisted.web`` channel's (which
        then is the transport's producer and keeps its own timeouts).
        """
        site = self.site
        site._channels.pop(self, None)
        channel = site.web().buildProtocol(self.transport.getPeer())
        self.transport.unregisterProducer()
        self._web = channel
        channel.makeConnection(self.transport)
        channel.dataReceived(data)

    def _send(self, data: bytes) -> None:
        """
        Write ``data``: straight to the socket when the transport has nothing
        queued (saving the reactor iteration and the two epoll changes a
        buffered write costs), the rest, if any, through the transport.
        Whenever anything is queued, the transport is disconnecting, or the
        socket reports anything but "would block", the transport's ordinary
        write does it (and so reports a broken connection as usual).
        """
        t = self.transport
        if (t.__class__ not in DIRECT or t.dataBuffer or t._tempDataLen
                or t.disconnecting or not t.connected):
            t.write(data)
            return
        try:
            sent = t.socket.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            t.write(data)  # the transport finds the error again and closes
            return
        if sent < len(data):
            t.write(data[sent:])

    def _close(self) -> None:
        """
        Close after the last answer: at once when it is all sent, as
        ``loseConnection`` would on the next reactor iteration; else once
        the transport has written the rest.
        """
        t = self.transport
        if (t.__class__ in DIRECT and not (t.dataBuffer or t._tempDataLen)
                and t.connected and not t.disconnecting):
            t.connectionLost(_DONE)  # which stops reading and writing
        else:
            self._lose()

    def _lose(self) -> None:
        """
        ``loseConnection``, once what is queued is written.  A transport
        closes only without a producer (if paused, it would wait for the
        producer instead), so stop being its producer first.
        """
        t = self.transport
        if t.producer is self:
            t.unregisterProducer()
        t.loseConnection()

    def _flush(self, out: list[bytes]) -> None:
        if out:
            self._send(out[0] if len(out) == 1 else b"".join(out))

    def _later(self, answer: tuple[bytes, bool]) -> None:
        self._blocked = False
        data_out, close = answer
        if self._closed or getattr(self.transport, "disconnected", False):
            return
        self._send(data_out)
        if close:
            self._buf = b""
            self._close()
            return
        self._process(self.site.seconds())
        if self._buf and self._web is None and not self._head_since:
            self._head_since = self.site.seconds()

    def _settled(self, result: Any) -> None:
        if isinstance(result, Failure):
            self._broken(result)
        else:
            self._later(result)

    def _broken(self, f: Any) -> None:
        log.failure("fast path answer failed", f, level=LogLevel.error)
        self.transport.abortConnection()

    def _answer(self, request: bytes, site: FastSite, now: float) -> Any:
        """
        The answer to one complete request (head and blank line), as
        ``(bytes, close)`` or a Deferred of it, or ``None`` for Klein.
        """
        wire = site.wire
        renderer = site.renderer
        view = renderer.current()
        if wire.view is not view:
            wire.heads.clear()
            wire.view = view
        plan = wire.heads.get(request)
        if plan is None:
            plan = self._plan(request[:-4], renderer, wire)
            if plan is None:
                return None
            if len(request) <= MAX_MEMO_HEAD:
                heads = wire.heads
                if len(heads) >= MAX_MEMO_HEADS:
                    heads.clear()
                heads[request] = plan
        kind = plan[0]
        if kind is FIXED:
            _, key, status, tail, close = plan
        elif kind is ROTATE:
            _, rr_key, answers, close = plan
            status, tail, key = answers[renderer.rr.next(rr_key, len(answers))]
        elif kind is FALLBACK:
            _, key, status, tail, close, why = plan
            fallbacks = renderer.fallbacks
            fallbacks[why] = fallbacks.get(why, 0) + 1
        else:
            key = None
        if key is not None:
            counts = renderer.requests
            counts[key] = counts.get(key, 0) + 1
            return status + site.date.line(now) + tail, close
        _, label, route, query, as_json, is_head, close = plan
        # a Response or a Deferred of one, told apart by class (isinstance
        # with Deferred costs ten times as much), which mypy cannot narrow
        r: Any = renderer.replica_query(route, query, as_json, query_args)
        if r.__class__ is Deferred:
            return r.addCallback(self._counted, label, is_head, close)
        counts = renderer.requests
        key = (label, r.status)
        counts[key] = counts.get(key, 0) + 1
        status, tail = wire.parts(r, is_head, close)
        return status + site.date.line(now) + tail, close

    @staticmethod
    def _plan(head: bytes, renderer: Renderer, wire: Wire) -> tuple[Any, ...] | None:
        """
        Parse a request head: what it asks for, or ``None`` for Klein.
        """
        if _ODD_BYTES.search(head):
            return None  # non-ASCII or control bytes: twisted.web judges them
        line_end = head.find(b"\r\n")
        request_line = head if line_end < 0 else head[:line_end]
        parts = request_line.split(b" ")
        if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", HTTP_1_0):
            return None
        method, target, version = parts
        if method == b"GET":
            is_head = False
        elif method == b"HEAD":
            is_head = True
        else:
            return None
        path, _, query = target.partition(b"?")
        accept = None
        close: bool | bytes | None = None
        if line_end >= 0:
            lines = head[line_end + 2:].split(b"\r\n")
            if len(lines) > MAX_HEADERS:
                return None
            for raw in lines:
                name, sep, value = raw.partition(b":")
                if not sep or not name or name != name.strip() or b" " in name:
                    return None
                n = len(name)
                if n not in HEADER_LENGTHS:
                    continue  # not a header the fast path must look at
                lname = name.lower()
                if lname == b"accept":
                    accept = value.strip().decode("latin-1")
                elif lname == b"connection" and close is None:
                    # the first Connection header counts, as in twisted.web
                    tokens = value.strip().lower().split(b" ")
                    close = b"close" in tokens
                elif lname in NOT_FAST:
                    return None
        # HTTP/1.0 (HAProxy's default check): answered as such, then closed
        close = HTTP_1_0 if version == HTTP_1_0 else bool(close)
        label = LABELS.get(path)
        if label is None:
            if path in KLEIN_PATHS or not PLAIN_PATH.fullmatch(path):
                return None
            # no such route: Klein's 404 without loading Klein (a browser's
            # /favicon.ico, a mistyped path, a scanner)
            status, tail = wire.parts(EMPTY_404, is_head, close)
            return (FIXED, ("other", 404), status, tail, close)
        route = REPLICA_PATHS.get(path)
        if route is not None:
            as_json = wants_json(accept)
            how = renderer.replica_plan(route, query, as_json, query_args)
            if how is None:
                return (REPLICA, label, route, query, as_json, is_head, close)
            if how[0] == "rotate":
                _, responses, rr_key = how
                answers = []
                for r in responses:
                    status, tail = wire.parts(r, is_head, close)
                    answers.append((status, tail, (label, r.status)))
                return (ROTATE, rr_key, tuple(answers), close)
            r = how[1]
            status, tail = wire.parts(r, is_head, close)
            if how[0] == "fallback":
                return (FALLBACK, (label, r.status), status, tail, close, how[2])
            return (FIXED, (label, r.status), status, tail, close)
        if path == b"/master":
            r = renderer.master(wants_json(accept))
        elif path == b"/hosts":
            r = renderer.hosts()
        elif path == b"/status":
            r = renderer.status((query_args(query) if query else {}).get("host"))
        elif path == b"/live":
            r = renderer.live()
        elif path == b"/ready":
            r = renderer.ready()
        else:
            r = renderer.version
        status, tail = wire.parts(r, is_head, close)
        return (FIXED, (label, r.status), status, tail, close)

    def _counted(self, r: Response, label: str, is_head: bool, close: bool | bytes
                 ) -> tuple[bytes, bool | bytes]:
        site = self.site
        site.renderer.count(label, r.status)
        status, tail = site.wire.parts(r, is_head, close)
        return status + site.date.line() + tail, close
