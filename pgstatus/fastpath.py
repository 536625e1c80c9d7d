"""
A fast path in front of the Klein application.

:class:`FastChannel` is the ``twisted.web`` HTTP channel with one shortcut:
a complete, well-formed ``GET`` or ``HEAD`` request over HTTP/1.1 for one of
the API's own routes is answered straight from
:class:`~pgstatus.responses.Renderer` with the bytes Klein would have sent
(status, headers, body).  Anything else, and everything after it on the same
connection, goes to the ordinary channel and so to Klein, which stays the
single definition of the API.  Tests compare both byte for byte.
"""

from __future__ import annotations

from email.utils import formatdate
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.logger import Logger, LogLevel
from twisted.web.http import HTTPChannel, parse_qs, responses
from twisted.web.server import Site, version

from pgstatus.responses import REPLICA_ROUTES, Renderer, Response, wants_json

#: longest request head the fast path looks at; longer ones go to Klein
MAX_HEAD = 8192
#: most bytes of memoised response bytes (and the responses they belong to)
MAX_WIRE_BYTES = 1 << 20
#: longest request head accepted at all (twisted.web's own limit)
MAX_TOTAL = HTTPChannel.totalHeadersSize
_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
              b"Connection: close\r\n\r\n")
#: most bytes buffered behind a waiting answer before the client is cut off
MAX_PENDING = 65536

log = Logger(namespace="pgstatus.http")

_SERVER = b"Server: " + version + b"\r\n"


class _Wire:
    """
    Response bytes without the ``Date`` header, memoised per response.

    Responses of ``/hosts`` and ``/status`` change with nearly every check,
    so the memo is bounded by the bytes it holds (it keeps the responses it
    is keyed by alive), not only by its number of entries.
    """

    def __init__(self, max_bytes: int = MAX_WIRE_BYTES) -> None:
        self._memo: dict[tuple[Response, bool, bool], tuple[bytes, bytes]] = {}
        self._plain: dict[Response, tuple[bytes, bytes]] = {}
        self._held = 0
        self._max_bytes = max_bytes

    def reset(self) -> None:
        """
        Forget everything: called when the monitor publishes a new view, so
        the memo only ever holds bytes of the current view's responses.
        """
        self._memo.clear()
        self._plain.clear()
        self._held = 0

    def parts(self, r: Response, head_only: bool, close: bool) -> tuple[bytes, bytes]:
        if not (head_only or close):
            # the common case, keyed by the response alone (identity hash)
            got = self._plain.get(r)
            if got is None:
                got = self._plain[r] = self._parts(r, False, False)
            return got
        return self._parts(r, head_only, close)

    def _parts(self, r: Response, head_only: bool, close: bool) -> tuple[bytes, bytes]:
        key = (r, head_only, close)
        got = self._memo.get(key)
        if got is None:
            size = 2 * len(r.body) + 256
            if len(self._memo) >= 4096 or self._held + size > self._max_bytes:
                self._memo.clear()
                self._plain.clear()
                self._held = 0
            self._held += size
            head = [b"HTTP/1.1 %d %s\r\n" % (r.status, responses.get(r.status, b"Unknown"))]
            if close:
                head.append(b"Connection: close\r\n")
            head.append(_SERVER)
            tail = []
            if r.content_type is not None:
                tail.append(b"Content-Type: " + r.content_type + b"\r\n")
            if r.status == 405:
                tail.append(b"Allow: GET, HEAD\r\n")
            tail.append(b"Content-Length: %d\r\n\r\n" % len(r.body))
            if not head_only:
                tail.append(r.body)
            got = self._memo[key] = (b"".join(head), b"".join(tail))
        return got


class _Date:
    """
    The ``Date`` header line, rebuilt at most once a second.
    """

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._next = float("-inf")
        self._line = b""

    def line(self) -> bytes:
        now = self._clock.seconds()
        if now >= self._next:
            second = int(now)
            self._next = second + 1
            self._line = b"Date: " + formatdate(second, usegmt=True).encode() + b"\r\n"
        return self._line


class FastSite(Site):
    """
    A ``Site`` whose channels answer the API's routes directly.

    :param resource: the Klein resource, for everything else.
    :param renderer: what the API answers.
    :param reactor: the clock for the ``Date`` header.
    :param fast: enable the shortcut (off: plain ``twisted.web``).
    """

    noisy = False

    def __init__(self, resource: Any, renderer: Renderer, reactor: Any,
                 fast: bool = True, max_connections: int = 10000,
                 idle_timeout: float = 60.0, header_timeout: float = 10.0) -> None:
        super().__init__(resource, reactor=reactor, timeout=idle_timeout)
        self.renderer = renderer
        self.wire = _Wire()
        self.date = _Date(reactor)
        self.fast = fast
        self.protocol = FastChannel
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.connections = 0
        self.refused = 0

    def buildProtocol(self, addr: Any) -> Any:
        """
        A channel, or, past ``max_connections``, a protocol that answers
        503 and closes.
        """
        if self.connections >= self.max_connections:
            self.refused += 1
            return _Busy()
        return super().buildProtocol(addr)

    def log(self, request: Any) -> None:
        """
        No access log: the API is called on every application request.
        """


def _args(query: bytes) -> dict[str, str]:
    if b"%" not in query and b"+" not in query:
        out: dict[str, str] = {}
        for part in query.split(b"&"):
            if not part:
                continue
            k, sep, v = part.partition(b"=")
            if not sep:
                continue
            out.setdefault(k.decode("utf-8", "replace"), v.decode("utf-8", "replace"))
        return out
    # the same parser twisted.web uses for request.args
    return {
        k.decode("utf-8", "replace"): vs[0].decode("utf-8", "replace")
        for k, vs in parse_qs(query, 1).items()
        if vs
    }


_REPLICA_PATHS = {b"/" + r.encode(): r for r in REPLICA_ROUTES}
#: headers that send a request to twisted.web (a body, or a protocol change)
_NOT_FAST = (b"content-length", b"transfer-encoding", b"expect", b"upgrade")
#: lengths of the header names the fast path reads or refuses
_HEADER_LENGTHS = frozenset(len(n) for n in (b"accept", b"connection", *_NOT_FAST))
#: the metrics label of every path the fast path answers
_LABELS = {p: p[1:].decode() for p in (
    b"/master", b"/hosts", b"/status", b"/live", b"/ready", b"/version", *_REPLICA_PATHS)}


class _Busy(Protocol):
    """
    Refuses a connection over the limit politely.
    """

    def connectionMade(self) -> None:
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n")
        self.transport.loseConnection()


class FastChannel(HTTPChannel):
    """
    ``HTTPChannel`` with the shortcut described in the module docstring.
    """

    site: FastSite
    _slow = False
    _blocked = False
    _buf = b""
    _head_timer: Any = None

    def connectionMade(self) -> None:
        self._seconds = self.site.reactor.seconds
        self._last_data = self._seconds()
        super().connectionMade()
        self.site.connections += 1

    def resetTimeout(self) -> None:
        """
        Note activity.  Instead of moving the idle timer on every request
        (a reactor operation), the timer checks on expiry whether the
        connection was really idle that long.
        """
        self._last_data = self._seconds()

    def timeoutConnection(self) -> None:
        idle = self._seconds() - self._last_data
        if self.timeOut is not None and idle < self.timeOut:
            self.setTimeout(self.timeOut - idle)
            return
        super().timeoutConnection()

    def connectionLost(self, reason: Any) -> None:
        self.site.connections -= 1
        self._stop_head_timer()
        super().connectionLost(reason)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            if self._head_timer.active():
                self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self._slow:
            self._stop_head_timer()
            return super().dataReceived(data)
        self.resetTimeout()
        self._buf = self._buf + data if self._buf else data
        if self._blocked:
            if len(self._buf) > MAX_PENDING:
                self.transport.loseConnection()
            return
        self._process()
        if self._buf and self._head_timer is None and not self._slow:
            # a request head must arrive complete within header_timeout
            self._head_timer = self.callLater(self.site.header_timeout, self._head_too_slow)

    def _process(self) -> None:
        buf = self._buf
        site = self.site
        while buf:
            end = buf.find(b"\r\n\r\n", 0, MAX_TOTAL + 4)
            if end < 0:
                if len(buf) > MAX_TOTAL:
                    self._buf = b""
                    self.transport.write(_TOO_LARGE)
                    self.transport.loseConnection()
                    return
                self._buf = buf
                return
            if end > MAX_HEAD:
                break  # a big but acceptable head: twisted.web parses it
            try:
                answer = self._answer(buf[:end], site) if site.fast else None
            except Exception:
                # let Klein answer (and log) whatever went wrong here
                answer = None
            if answer is None:
                break
            buf = buf[end + 4:]
            if isinstance(answer, Deferred):
                # answer later; requests pipelined behind it wait their turn
                self._buf = buf
                self._blocked = True
                answer.addCallback(self._later)
                answer.addErrback(self._broken)
                return
            data_out, close = answer
            self.transport.write(data_out)
            if close:
                self._buf = b""
                self.transport.loseConnection()
                return
        else:
            self._buf = b""
            if self._head_timer is not None:
                self._stop_head_timer()
            return
        # Hand this and everything after it to twisted.web and Klein.
        self._stop_head_timer()
        self._slow = True
        self._buf = b""
        super().dataReceived(buf)

    def _later(self, answer: tuple[bytes, bool]) -> None:
        self._blocked = False
        data_out, close = answer
        if getattr(self.transport, "disconnected", False):
            return
        self.transport.write(data_out)
        if close:
            self._buf = b""
            self.transport.loseConnection()
            return
        self._process()

    def _broken(self, f: Any) -> None:
        log.failure("fast path answer failed", f, level=LogLevel.error)
        self.transport.abortConnection()

    def _answer(self, head: bytes, site: FastSite) -> Any:
        line_end = head.find(b"\r\n")
        request_line = head if line_end < 0 else head[:line_end]
        parts = request_line.split(b" ")
        if len(parts) != 3 or parts[2] != b"HTTP/1.1":
            return None
        method, target, _ = parts
        if method == b"GET":
            is_head = False
        elif method == b"HEAD":
            is_head = True
        else:
            return None
        path, _, query = target.partition(b"?")
        accept = None
        close = False
        if line_end >= 0:
            for raw in head[line_end + 2:].split(b"\r\n"):
                name, sep, value = raw.partition(b":")
                if not sep or name != name.strip():
                    return None
                n = len(name)
                if n not in _HEADER_LENGTHS:
                    continue  # not a header the fast path must look at
                lname = name.lower()
                if lname == b"accept":
                    accept = value.strip().decode("latin-1")
                elif lname == b"connection":
                    tokens = value.strip().lower().split(b" ")
                    close = b"close" in tokens
                elif lname in _NOT_FAST:
                    return None
        r = self._route(path, query, accept, site.renderer)
        if r is None:
            return None
        if r.__class__ is Deferred:
            return r.addCallback(self._counted, _LABELS[path], is_head, close)
        counts = site.renderer.requests
        key = (_LABELS[path], r.status)
        counts[key] = counts.get(key, 0) + 1
        status, tail = site.wire.parts(r, is_head, close)
        return status + site.date.line() + tail, close

    def _counted(self, r: Response, label: str, is_head: bool, close: bool
                 ) -> tuple[bytes, bool]:
        self.site.renderer.count(label, r.status)
        return self._bytes(r, is_head, close)

    def _bytes(self, r: Response, is_head: bool, close: bool) -> tuple[bytes, bool]:
        site = self.site
        status, tail = site.wire.parts(r, is_head, close)
        return status + site.date.line() + tail, close

    @staticmethod
    def _route(path: bytes, query: bytes, accept: str | None, renderer: Renderer
               ) -> Response | Deferred[Response] | None:
        if path == b"/master":
            return renderer.master(wants_json(accept))
        name = _REPLICA_PATHS.get(path)
        if name is not None:
            return renderer.replica_query(name, query, wants_json(accept), _args)
        if path == b"/hosts":
            return renderer.hosts()
        if path == b"/status":
            return renderer.status((_args(query) if query else {}).get("host"))
        if path == b"/live":
            return renderer.live()
        if path == b"/ready":
            return renderer.ready()
        if path == b"/version":
            return renderer.version
        return None
